// RUN: latch-opt %S/../../../examples/mlir/sgd_update.mlir --pass-pipeline='builtin.module(latch-to-ptx)' --emit=ptx | FileCheck %s
// RUN: latch-opt %S/../../../examples/mlir/sgd_update.mlir --pass-pipeline='builtin.module(latch-lower-rules, latch-bufferize)' | FileCheck %s --check-prefix=PLAN
// RUN: latch-opt %S/../../../examples/mlir/sgd_update.mlir --pass-pipeline='builtin.module(latch-to-ptx)' --emit=ptx | grep -c '.visible .entry' | FileCheck %s --check-prefix=COUNT
// A whole Latch program (state, update, clipping, schedule, SGD with momentum) goes all the
// way to sm_90 PTX: every piece of it, including the scalar schedule, becomes a kernel.

// COUNT: 10
// CHECK: gpu.binary "update_kernel"
// CHECK: .target sm_90
// Full reductions (the loss, the squared gradient norm) run as one block of 256 threads
// combining partial sums with warp shuffles; the scalar code (clip coefficient, schedule)
// runs in a one-thread kernel; the SGD-momentum step is one fused elementwise kernel:
// buf' = m·buf + g; p' = p − lr·buf', storing both the parameter and the buffer, four f32
// lanes per thread (16-byte loads and stores).
// The two products with the data matrix (the residual and the gradient) are contraction
// kernels (latch_contract_*, after the other kernels); the gradient's output [64, 16] is
// too small to fill the GPU, so it is split along k and update_kernel_2 adds the slices,
// starting from zero (latch-fold-zero-fills: the gradient's zero fill is gone); the residual
// writes its sums into its zero-initialised output directly (that zero fill is gone too).
// CHECK: gpu.binary "update_kernel_1"
// CHECK: .maxntid 256, 1, 1
// CHECK: shfl.sync.bfly.b32
// CHECK: gpu.binary "update_kernel_2"
// CHECK: ld.global.b32
// CHECK: add.rn.f32
// CHECK: gpu.binary "update_kernel_5"
// CHECK: ld.global.v4.b32
// CHECK: mul.rn.f32 [[MB:%r[0-9]+]],
// CHECK: add.rn.f32 [[BUF:%r[0-9]+]],
// CHECK: mul.rn.f32 [[STEP:%r[0-9]+]], {{%r[0-9]+}}, [[BUF]]
// CHECK: sub.rn.f32 [[P:%r[0-9]+]], {{%r[0-9]+}}, [[STEP]]
// CHECK: st.global.v4.b32 [{{%rd[0-9]+}}], {[[P]],
// CHECK: st.global.v4.b32 [{{%rd[0-9]+}}], {[[BUF]],
// CHECK: gpu.binary "latch_contract_0"
// CHECK: fma.rn.f32
// CHECK: gpu.binary "latch_contract_1"
// CHECK: %ctaid.z
// CHECK: fma.rn.f32

// PLAN-LABEL: func.func @update(
// PLAN-SAME: %{{.*}}: memref<64x16xf32>, %{{.*}}: memref<i64>, %{{.*}}: memref<64x16xf32>, %{{.*}}: memref<256x64xf32>, %{{.*}}: memref<256x16xf32>)
// PLAN-SAME: latch.arena_bytes = {{[0-9]+}} : i64, latch.buffer_bytes = {{[0-9]+}} : i64
// PLAN-NOT: "latch.
// PLAN: memref.alloc() {{.*}}latch.offset = 0 : i64
// PLAN: return
