// CASE: syntax: a generic op whose trailing function type lacks '-> results'
// EXPECT: error
"latch.update"() ({
^bb0(%l: tensor<f32>):
  "latch.return"(%l) : (tensor<f32>)
}) {sym_name = "u"} : () -> ()
