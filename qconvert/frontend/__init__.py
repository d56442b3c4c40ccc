"""The TensorFlow side: reading a frozen GraphDef without TensorFlow (``graphdef``: our own
protobuf schema), importing it into the IR (``importer``), evaluating constant shape
arithmetic as TensorFlow folds it (``const_eval``), freezing SavedModels and Keras files
when TensorFlow is installed (``tf_frozen``, the one module that imports it), and the
TensorFlow op table (``tf_ops``: each GraphDef op, the TFLite op it becomes, its shape).

With ``legalize/`` (whose ``tf_rewrites`` rewrites them into TFLite ops) the only place that
knows TensorFlow op names.

May import: ``qconvert.ir``, ``qconvert.ops`` (window arithmetic), ``qconvert.quant``,
``qconvert.io``, ``qconvert.errors``; TensorFlow only in ``tf_frozen``, inside functions.
"""
