"""The pipeline and the conversion.

``pipeline``: ``STAGES`` (the stages in order, each a package's passes, declared as data) and
``run`` (stages, invariant checks, ``--dump-after``, ``stop_before``) over a graph and its
:class:`~qconvert.options.ConvertOptions`. ``conversion``: ``run_conversion`` (any model input
to .tflite bytes and the final IR, no file written) and the 0.1 keyword form ``convert_graph``;
``qconvert.api`` builds the user's whole job on it. ``litert_engine``: the LiteRT calibration
engine (``--calibration-engine litert``), loaded only when asked for.

May import: every stage package, ``qconvert.frontend``, ``qconvert.calibration``,
``qconvert.schema`` (the writer), ``qconvert.ir``, ``qconvert.options``, ``qconvert.io``,
``qconvert.errors``. Not ``runtime``, ``tools`` or ``api``.
"""
