// CASE: syntax: an affine map using a dimension it does not declare
// EXPECT: use of undeclared identifier
#map = affine_map<(d0) -> (d1)>
func.func @f() {
  return
}
