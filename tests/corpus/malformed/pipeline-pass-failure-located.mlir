// CASE: pipeline: latch-bufferize run on a Latch op that was never lowered (a located pass failure)
// ARGS: --pass-pipeline='builtin.module(latch-bufferize)'
// EXPECT: op was not bufferized
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %r = "latch.accumulate"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}
