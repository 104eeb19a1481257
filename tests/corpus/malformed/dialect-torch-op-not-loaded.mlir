// CASE: unknown-dialect: a torch dialect op (torch-mlir's dialect is not loaded in latch-opt)
// EXPECT: 'torch.aten.mm' op is not a registered operation
func.func @f(%a: tensor<2x2xf32>) {
  %r = "torch.aten.mm"(%a, %a) : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  return
}
