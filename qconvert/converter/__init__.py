"""The pipeline and the library API.

``pipeline``: ``STAGES`` (the stages in order, each a package's passes, declared as data),
``Options`` (what the user asked for) and ``run`` (stages, invariant checks, ``--dump-after``,
``stop_before``). ``api``: ``convert_graph`` / ``convert`` (GraphDef or SavedModel/Keras in,
.tflite bytes out), published as ``qconvert.api``.

May import: every stage package, ``qconvert.frontend``, ``qconvert.calibration``,
``qconvert.schema`` (the writer), ``qconvert.ir``, ``qconvert.io``, ``qconvert.errors``.
Not ``runtime`` or ``tools``.
"""
