// CASE: truncated: the file ends after '%x ='
// EXPECT: error
func.func @f() {
  %x =