// CASE: syntax: a block label without a name, and arguments without types
// EXPECT: error
"latch.update"() ({
^(%l):
  "latch.return"(%l) : (tensor<f32>) -> ()
}) {sym_name = "u"} : () -> ()
