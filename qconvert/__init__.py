"""qconvert: TensorFlow QAT graphs to fully-int8 TFLite flatbuffers."""

__version__ = "0.1.0"
