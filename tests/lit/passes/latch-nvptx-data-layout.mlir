// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-nvptx-data-layout)' | FileCheck %s
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-nvptx-data-layout, gpu-lower-to-nvvm-pipeline{cubin-chip=sm_90a cubin-features=+ptx81 cubin-format=isa kernel-bare-ptr-calling-convention=true})' --emit=ptx | FileCheck %s --check-prefix=PTX
// RUN: latch-opt %s --pass-pipeline='builtin.module(gpu-lower-to-nvvm-pipeline{cubin-chip=sm_90a cubin-features=+ptx81 cubin-format=isa kernel-bare-ptr-calling-convention=true})' --emit=ptx | FileCheck %s --check-prefix=SPLIT
// A kernel that counts the i64 class ids equal to its own (the routing rank's inner loop,
// shortened).  With NVPTX's layout each i64 load and the store are one 8-byte access;
// without it (translation under LLVM's default layout, i64 4-byte aligned) each becomes two
// 4-byte ones.  A module that already has a layout keeps it.

// CHECK: gpu.module @k attributes {llvm.data_layout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"}
// CHECK: gpu.module @kept attributes {llvm.data_layout = "e-i64:64"}
// PTX-LABEL: .entry count_equal(
// PTX-NOT: ld.global.b32
// PTX-COUNT-2: ld.global.b64
// PTX-NOT: ld.global.b32
// PTX: st.global.b64
// PTX: ret;
// SPLIT-LABEL: .entry count_equal(
// SPLIT-COUNT-4: ld.global.b32
// SPLIT-NOT: ld.global.b64
// SPLIT: st.global.b32
// SPLIT: st.global.b32
// SPLIT: ret;
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @count_equal(%cls: memref<64xi64>, %out: memref<64xi64>) kernel {
      %t = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %mine = memref.load %cls[%t] : memref<64xi64>
      %other = memref.load %cls[%c0] : memref<64xi64>
      %eq = arith.cmpi eq, %mine, %other : i64
      %one = arith.extui %eq : i1 to i64
      memref.store %one, %out[%t] : memref<64xi64>
      gpu.return
    }
  }
  gpu.module @kept attributes {llvm.data_layout = "e-i64:64"} {
    gpu.func @other(%a: memref<4xi64>) kernel {
      gpu.return
    }
  }
}
