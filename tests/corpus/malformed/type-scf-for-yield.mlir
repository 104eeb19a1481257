// CASE: type: scf.for yielding an i32 for an f32 iteration argument
// EXPECT: error
func.func @f(%lb: index, %ub: index, %s: index, %x: f32, %y: i32) -> f32 {
  %r = scf.for %i = %lb to %ub step %s iter_args(%acc = %x) -> (f32) {
    scf.yield %y : i32
  }
  return %r : f32
}
