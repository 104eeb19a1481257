// RUN: %PYTHON -c "import sys; sys.stdout.buffer.write(bytes(range(256)) * 4)" > %t.bin
// RUN: %not latch-opt %t.bin 2>&1 | FileCheck %s
// RUN: %PYTHON -c "import sys; sys.stdout.buffer.write(b'ML\xefR' + bytes(64))" > %t.bc
// RUN: %not latch-opt %t.bc 2>&1 | FileCheck %s --check-prefix=BYTECODE
// Binary junk and a broken bytecode header give diagnostics and exit 1.

// CHECK: .bin:{{[0-9]+}}:{{[0-9]+}}: error: input is neither UTF-8 text nor MLIR bytecode
// CHECK-NOT: Traceback
// BYTECODE: error:
// BYTECODE-NOT: Traceback
