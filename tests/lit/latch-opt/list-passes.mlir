// RUN: latch-opt --list-passes | FileCheck %s
// Every Latch pass and every named stage pipeline is listed with a summary.

// CHECK-LABEL: Latch passes:
// CHECK-DAG: latch-verify
// CHECK-DAG: latch-lower-state
// CHECK-DAG: latch-lower-optimizers
// CHECK-LABEL: Named pipelines (stages):
// CHECK: latch-lower-rules
// CHECK: latch-bufferize
// CHECK: latch-form-kernels
// CHECK: latch-kernels-to-ptx
// CHECK: latch-to-ptx
