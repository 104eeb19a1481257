// CASE: type: a generic func.return whose declared operand type disagrees with the value
// EXPECT: use of value '%a' expects different type than prior uses
func.func @f(%a: f32) -> f32 {
  "func.return"(%a) : (f64) -> ()
}
