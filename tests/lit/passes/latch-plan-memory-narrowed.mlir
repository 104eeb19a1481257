// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-plan-memory)' | FileCheck %s
// RUN: latch-opt %s --pass-pipeline='builtin.module(latch-plan-memory, latch-form-contraction-kernels)' | FileCheck %s --check-prefix=KERNEL
// A product whose just-zeroed f32 result is read only by its bf16 rounding, right after:
// latch-form-contraction-kernels will write the rounded values from the product's kernel,
// so the plan must keep the copy's buffer apart from the product's operands — the operand
// %x dies at the product, and the copy, allocated after it, would otherwise share its slot
// (both at 16384, and the kernel would then write f32).  The copy's allocation is moved in
// front of the product: its live range starts there.
// CHECK-LABEL: func.func @product_then_round(
// CHECK: memref.alloc() {{{.*}}latch.offset = 24576 : i64} : memref<64x32xbf16>
// CHECK: memref.alloc() {{{.*}}latch.offset = 0 : i64} : memref<64x64xf32>
// CHECK: memref.alloc() {{{.*}}latch.offset = 16384 : i64} : memref<64x64xbf16>
// CHECK: iterator_types = ["parallel", "parallel", "reduction"]
// KERNEL-LABEL: func.func @product_then_round(
// KERNEL: %[[OUT:.*]] = memref.alloc() {{{.*}}latch.offset = {{[1-9][0-9]*}} : i64} : memref<64x64xbf16>
// KERNEL: gpu.launch_func {{.*}} args(%{{.*}} : memref<64x32xbf16>, %arg1 : memref<32x64xbf16>, %[[OUT]] : memref<64x64xbf16>)
#id = affine_map<(i, j) -> (i, j)>
#a = affine_map<(i, j, k) -> (i, k)>
#b = affine_map<(i, j, k) -> (k, j)>
#c = affine_map<(i, j, k) -> (i, j)>
func.func @product_then_round(%in: memref<64x32xf32>, %w: memref<32x64xbf16>, %r: memref<64x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %x = memref.alloc() : memref<64x32xbf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%in : memref<64x32xf32>) outs(%x : memref<64x32xbf16>) {
  ^bb0(%v: f32, %o: bf16):
    %t = arith.truncf %v : f32 to bf16
    linalg.yield %t : bf16
  }
  %acc = memref.alloc() : memref<64x64xf32>
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel", "parallel"]} outs(%acc : memref<64x64xf32>) {
  ^bb0(%o: f32):
    linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %w : memref<64x32xbf16>, memref<32x64xbf16>) outs(%acc : memref<64x64xf32>) {
  ^bb0(%p: bf16, %q: bf16, %o: f32):
    %pe = arith.extf %p : bf16 to f32
    %qe = arith.extf %q : bf16 to f32
    %m = arith.mulf %pe, %qe : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  }
  %out = memref.alloc() : memref<64x64xbf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%acc : memref<64x64xf32>) outs(%out : memref<64x64xbf16>) {
  ^bb0(%v: f32, %o: bf16):
    %t = arith.truncf %v : f32 to bf16
    linalg.yield %t : bf16
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%out : memref<64x64xbf16>) outs(%r : memref<64x64xf32>) {
  ^bb0(%v: bf16, %o: f32):
    %t = arith.extf %v : bf16 to f32
    linalg.yield %t : f32
  }
  return
}
