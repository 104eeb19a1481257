// RUN: latch-opt %S/../../../examples/mlir/sgd_update.mlir --pass-pipeline='builtin.module(latch-to-ptx)' --emit=ptx | FileCheck %s
// RUN: latch-opt %S/../../../examples/mlir/sgd_update.mlir --pass-pipeline='builtin.module(latch-lower-rules, latch-bufferize)' | FileCheck %s --check-prefix=PLAN
// A whole Latch program (state, update, clipping, schedule, SGD with momentum) goes all the
// way to sm_90 PTX: the forward matmul, the residual, the loss, the gradient, the norm and
// the fused optimizer step each become a kernel.

// CHECK: gpu.binary "update_kernel"
// CHECK: .target sm_90
// CHECK-COUNT-5: .visible .entry update_kernel(
// The last kernel is the fused SGD-momentum step: buf' = m·buf + g; p' = p − lr·buf',
// storing both the parameter and the buffer.
// CHECK: gpu.binary "update_kernel_4"
// CHECK: mul.rn.f32 [[MB:%r[0-9]+]],
// CHECK: add.rn.f32 [[BUF:%r[0-9]+]],
// CHECK: mul.rn.f32 [[STEP:%r[0-9]+]], {{%r[0-9]+}}, [[BUF]]
// CHECK: sub.rn.f32 [[P:%r[0-9]+]], {{%r[0-9]+}}, [[STEP]]
// CHECK: st.global.b32 [{{%rd[0-9]+}}], [[P]]
// CHECK: st.global.b32 [{{%rd[0-9]+}}], [[BUF]]
// CHECK-NOT: .entry

// PLAN-LABEL: func.func @update(
// PLAN-SAME: %{{.*}}: memref<64x16xf32>, %{{.*}}: memref<i64>, %{{.*}}: memref<64x16xf32>, %{{.*}}: memref<256x64xf32>, %{{.*}}: memref<256x16xf32>)
// PLAN-SAME: latch.arena_bytes = {{[0-9]+}} : i64, latch.buffer_bytes = {{[0-9]+}} : i64
// PLAN-NOT: "latch.
// PLAN: memref.alloc() {{.*}}latch.offset = 0 : i64
// PLAN: return
