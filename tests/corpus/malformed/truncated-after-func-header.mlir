// CASE: truncated: the file ends right after 'func.func @f('
// EXPECT: error
func.func @f(