// RUN: latch-opt %s --split-input-file | FileCheck %s
// RUN: %not latch-opt %s --split-input-file --pass-pipeline='builtin.module(bogus)' 2>&1 | FileCheck %s --check-prefix=ERR
// Each chunk is parsed and printed on its own; outputs are joined by the marker again.

// CHECK-LABEL: func.func @first
// CHECK: // -----
// CHECK-LABEL: func.func @second
// ERR: error: unknown pass or bad options in 'bogus'
func.func @first() {
  return
}

// -----

func.func @second() {
  return
}
