"""Integer-only execution of qconvert's .tflite files (``qconvert run``)."""
