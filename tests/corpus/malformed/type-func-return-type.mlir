// CASE: type: func.return of an i32 from a function declared to return f32
// EXPECT: doesn't match function result type
func.func @f(%a: i32) -> f32 {
  return %a : i32
}
