// RUN: latch-opt %s --split-input-file | latch-opt --split-input-file | FileCheck %s
// latch.all_reduce prints and parses back unchanged in both forms.

// CHECK-LABEL: "latch.update"
// CHECK: %[[R:.+]]:2 = "latch.all_reduce"(%{{.+}}, %{{.+}}) {bucket = 3 : i64, reduction = "mean"} : (tensor<4xf32>, tensor<f32>) -> (tensor<4xf32>, tensor<f32>)
// CHECK: "latch.return"(%[[R]]#1)
"latch.update"() ({
^bb0(%g: tensor<4xf32>, %l: tensor<f32>):
  %r:2 = "latch.all_reduce"(%g, %l) {bucket = 3 : i64, reduction = "mean"} : (tensor<4xf32>, tensor<f32>) -> (tensor<4xf32>, tensor<f32>)
  "latch.return"(%r#1) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()

// -----

// CHECK-LABEL: func.func @buffers
// CHECK: "latch.all_reduce"(%{{.+}}) {bucket = 0 : i64, reduction = "sum"} : (memref<5xf32>) -> ()
func.func @buffers(%b: memref<5xf32>) {
  "latch.all_reduce"(%b) {bucket = 0 : i64, reduction = "sum"} : (memref<5xf32>) -> ()
  return
}
