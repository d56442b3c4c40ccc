"""The commands beside ``convert``: ``dump`` (what is in a .tflite, requant records checked),
``check`` (will a .tflite run on a target), ``compare`` (per-layer error of an int8 model
against its float graph), ``batch`` (many models, a JSON report), ``run`` (the integer executor
on files of inputs); what they share: ``tflite_file`` (loading, LiteRT's quantization checks),
``targets`` (each target's constraints), ``text`` (aligned tables), ``jsonable`` (JSON values).

May import: ``qconvert.converter``, ``qconvert.runtime``, ``qconvert.calibration``,
``qconvert.schema``, and everything below them. The CLI imports each tool only when its
command runs.
"""
