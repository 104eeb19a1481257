// CASE: pipeline: --emit=ptx on a module that has no gpu.binary
// ARGS: --emit=ptx
// EXPECT: --emit=ptx: the module has no gpu.binary
func.func @f() {
  return
}
