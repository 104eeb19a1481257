// RUN: latch-opt %s --split-input-file --verify-diagnostics
// RUN: sed -e 's/expected-error/not-expected/' %s > %t.mlir
// RUN: %not latch-opt %t.mlir --split-input-file --verify-diagnostics 2>&1 | FileCheck %s --check-prefix=UNEXPECTED
// Errors are matched to `expected-error @+N {{...}}` comments, chunk by chunk, with the
// file's own line numbers; an unexpected or a missing diagnostic fails.

// UNEXPECTED: verify-diagnostics.mlir.tmp.mlir:[[@LINE+3]]:{{[0-9]+}}: error: unexpected error:
func.func @f() {
  // expected-error @+1 {{Dialect `foo' not found for custom op 'foo.bar'}}
  foo.bar
  return
}

// -----

func.func @g() {
  // expected-error @+1 {{use of undeclared SSA value name}}
  "func.return"(%nope) : (i32) -> ()
}
