// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-to-ptx{chip=sm_90a features=+ptx80})' --emit=ptx | FileCheck %s --check-prefix=SM90A
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-to-ptx)' --emit=ptx | FileCheck %s --check-prefix=SM90
// The chip and PTX features are options of latch-to-ptx (MLIR 22 would default to sm_50).

// SM90A-LABEL: gpu.binary "scale_kernel"
// SM90A: .version 8.0
// SM90A: .target sm_90a
// SM90-LABEL: gpu.binary "scale_kernel"
// SM90: .target sm_90
// SM90-NOT: sm_50
#id = affine_map<(d0) -> (d0)>
func.func @scale(%a: tensor<1024xf32>) -> tensor<1024xf32> {
  %c = arith.constant 2.0 : f32
  %e = tensor.empty() : tensor<1024xf32>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : tensor<1024xf32>) outs(%e : tensor<1024xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = arith.mulf %x, %c : f32
    linalg.yield %s : f32
  } -> tensor<1024xf32>
  return %r : tensor<1024xf32>
}
