// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-bufferize, latch-form-kernels)' | FileCheck %s
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-bufferize, latch-form-kernels{block=64})' | FileCheck %s --check-prefix=BLOCK64
// Stage 'kernels': each parallel loop nest is outlined into a gpu.func; the host keeps an
// ordered launch schedule.  The iteration space is flattened over blocks of 32x8 = 256
// threads by default (block=64: 64 threads), each thread four f32 lanes (4000 = 1000 x 4).

// CHECK: module attributes {gpu.container_module}
// CHECK-LABEL: func.func @add(
// CHECK-DAG: %[[C4:.*]] = arith.constant 4 : index
// CHECK-DAG: %[[C256:.*]] = arith.constant 256 : index
// CHECK: gpu.launch_func @add_kernel::@add_kernel blocks in (%[[C4]], %{{.*}}, %{{.*}}) threads in (%[[C256]], %{{.*}}, %{{.*}})
// CHECK-LABEL: gpu.module @add_kernel
// CHECK: gpu.func @add_kernel({{.*}}) kernel
// CHECK: gpu.block_id x
// CHECK: gpu.thread_id x
// CHECK: vector.load {{.*}} vector<4xf32>
// CHECK: gpu.return
// BLOCK64-DAG: %[[C64:.*]] = arith.constant 64 : index
// BLOCK64-DAG: %[[C16:.*]] = arith.constant 16 : index
// BLOCK64: gpu.launch_func @add_kernel::@add_kernel blocks in (%[[C16]], %{{.*}}, %{{.*}}) threads in (%[[C64]],
#id = affine_map<(d0) -> (d0)>
func.func @add(%a: tensor<4000xf32>, %b: tensor<4000xf32>) -> tensor<4000xf32> {
  %e = tensor.empty() : tensor<4000xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%a, %b : tensor<4000xf32>, tensor<4000xf32>) outs(%e : tensor<4000xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<4000xf32>
  return %r : tensor<4000xf32>
}
