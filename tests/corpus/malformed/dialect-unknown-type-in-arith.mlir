// CASE: unknown-dialect: arith.addf on a value of an unknown dialect's type
// EXPECT: must be floating-point-like
func.func @f(%a: !foo.bar) {
  %b = arith.addf %a, %a : !foo.bar
  return
}
