// RUN: latch-opt %s --split-input-file --pass-pipeline='builtin.module(latch-fuse-rows)' | FileCheck %s
// A router-like chain over [16, 8] rows: a fill, the row max, exp(x - max) and the max
// written into column 1 of a [16, 2] buffer through a strided view: every op reads and
// writes only row r of what the chain writes, so one scf.parallel over the 16 rows runs
// them in order, each op's other loops as scf.for nests (the reduction in its own order).

// CHECK-LABEL: func.func @chain(
// CHECK-NOT: linalg.generic
// CHECK: scf.parallel (%[[R:.*]]) = (%{{.*}}) to (%c16{{.*}}) step
// CHECK: memref.store %{{.*}}, %[[M:.*]][%[[R]]] : memref<16xf32>
// CHECK: scf.for %[[J:.*]] = %{{.*}} to %c8
// CHECK: memref.load %arg0[%[[R]], %[[J]]]
// CHECK: memref.load %[[M]][%[[R]]]
// CHECK: arith.maximumf
// CHECK: memref.store %{{.*}}, %[[M]][%[[R]]]
// CHECK: scf.for %[[K:.*]] = %{{.*}} to %c8
// CHECK: math.exp
// CHECK: memref.store %{{.*}}, %{{.*}}[%[[R]], %[[K]]] : memref<16x8xf32>
// CHECK: memref.store %{{.*}}, %{{.*}}[%[[R]], %{{.*}}] : memref<16x1xf32, strided<[2, 1], offset: 1>>
// CHECK: scf.reduce
// CHECK-NOT: linalg.generic
#rc = affine_map<(d0, d1) -> (d0, d1)>
#r = affine_map<(d0, d1) -> (d0)>
#v = affine_map<(d0) -> (d0)>
func.func @chain(%x: memref<16x8xf32>) -> (memref<16x8xf32>, memref<16x2xf32>) {
  %ninf = arith.constant 0xFF800000 : f32
  %m = memref.alloc() : memref<16xf32>
  linalg.generic {indexing_maps = [#v], iterator_types = ["parallel"]} outs(%m : memref<16xf32>) {
    ^bb0(%o: f32):
      linalg.yield %ninf : f32
  }
  linalg.generic {indexing_maps = [#rc, #r], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<16x8xf32>) outs(%m : memref<16xf32>) {
    ^bb0(%a: f32, %o: f32):
      %b = arith.maximumf %a, %o : f32
      linalg.yield %b : f32
  }
  %p = memref.alloc() : memref<16x8xf32>
  linalg.generic {indexing_maps = [#rc, #r, #rc], iterator_types = ["parallel", "parallel"]}
      ins(%x, %m : memref<16x8xf32>, memref<16xf32>) outs(%p : memref<16x8xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %d = arith.subf %a, %b : f32
      %e = math.exp %d : f32
      linalg.yield %e : f32
  }
  %g = memref.alloc() : memref<16x2xf32>
  %col = memref.subview %g[0, 1] [16, 1] [1, 1] : memref<16x2xf32> to memref<16x1xf32, strided<[2, 1], offset: 1>>
  linalg.generic {indexing_maps = [#r, #rc], iterator_types = ["parallel", "parallel"]}
      ins(%m : memref<16xf32>) outs(%col : memref<16x1xf32, strided<[2, 1], offset: 1>>) {
    ^bb0(%a: f32, %o: f32):
      linalg.yield %a : f32
  }
  return %p, %g : memref<16x8xf32>, memref<16x2xf32>
}

// -----
// An op reading what the run writes at another row (the row max read transposed, as a
// [1, 16] row broadcast to every row) ends the run there: the first two ops fuse, the
// reader stays a generic.
// CHECK-LABEL: func.func @other_row(
// CHECK: scf.parallel
// CHECK: scf.reduce
// CHECK: linalg.generic
#rc2 = affine_map<(d0, d1) -> (d0, d1)>
#r2 = affine_map<(d0, d1) -> (d0)>
#c2 = affine_map<(d0, d1) -> (d1)>
func.func @other_row(%x: memref<16x16xf32>) -> memref<16x16xf32> {
  %zero = arith.constant 0.0 : f32
  %m = memref.alloc() : memref<16xf32>
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} outs(%m : memref<16xf32>) {
    ^bb0(%o: f32):
      linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#rc2, #r2], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<16x16xf32>) outs(%m : memref<16xf32>) {
    ^bb0(%a: f32, %o: f32):
      %b = arith.addf %a, %o : f32
      linalg.yield %b : f32
  }
  %p = memref.alloc() : memref<16x16xf32>
  linalg.generic {indexing_maps = [#rc2, #c2, #rc2], iterator_types = ["parallel", "parallel"]}
      ins(%x, %m : memref<16x16xf32>, memref<16xf32>) outs(%p : memref<16x16xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %d = arith.subf %a, %b : f32
      linalg.yield %d : f32
  }
  return %p : memref<16x16xf32>
}

// -----
// Planned slots: the row max and the probabilities share arena bytes in the memory plan
// (their lifetimes were disjoint as separate kernels); run as one kernel, the written
// buffer gets a slot of its own (its latch.offset goes). A function argument written by
// an op keeps that op out of any run (a state buffer).
// CHECK-LABEL: func.func @slots(
// CHECK: %[[M:.*]] = memref.alloc() : memref<16xf32>
// CHECK: %[[P:.*]] = memref.alloc() : memref<16x8xf32>
// CHECK: scf.parallel
// CHECK: scf.reduce
// CHECK: linalg.generic {{.*}} outs(%arg1
#rc3 = affine_map<(d0, d1) -> (d0, d1)>
#r3 = affine_map<(d0, d1) -> (d0)>
func.func @slots(%x: memref<16x8xf32>, %state: memref<16x8xf32>) -> memref<16x8xf32> {
  %zero = arith.constant 0.0 : f32
  %m = memref.alloc() {latch.offset = 0 : i64} : memref<16xf32>
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} outs(%m : memref<16xf32>) {
    ^bb0(%o: f32):
      linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#rc3, #r3], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<16x8xf32>) outs(%m : memref<16xf32>) {
    ^bb0(%a: f32, %o: f32):
      %b = arith.addf %a, %o : f32
      linalg.yield %b : f32
  }
  %p = memref.alloc() {latch.offset = 0 : i64} : memref<16x8xf32>
  linalg.generic {indexing_maps = [#rc3, #r3, #rc3], iterator_types = ["parallel", "parallel"]}
      ins(%x, %m : memref<16x8xf32>, memref<16xf32>) outs(%p : memref<16x8xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %d = arith.divf %a, %b : f32
      linalg.yield %d : f32
  }
  linalg.generic {indexing_maps = [#rc3, #rc3], iterator_types = ["parallel", "parallel"]}
      ins(%p : memref<16x8xf32>) outs(%state : memref<16x8xf32>) {
    ^bb0(%a: f32, %o: f32):
      %s = arith.addf %a, %o : f32
      linalg.yield %s : f32
  }
  return %p : memref<16x8xf32>
}
