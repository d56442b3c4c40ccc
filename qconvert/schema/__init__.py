"""The TFLite backend: the flatbuffer writer, a reader, and the requant-parameter metadata.

This package is the only place in qconvert that imports the flatbuffer bindings
(``ai_edge_litert.schema_py_generated``); the rest of the project sees plain data.

Owns: ``writer`` (IR → .tflite bytes; the only module here that knows the IR), ``builder``
(the flatbuffer builder the writer packs with: ``flatbuffers.Builder``'s layout, faster),
``reader`` (.tflite bytes → plain dataclasses, for ``dump``, ``run`` and tests),
``codes`` (the schema's enums by name), ``layout`` (the enums and options tables' slots, generated
from ``schema_py_generated`` by ``gen_layout`` so that writing a model does not import it: 8 ms of
start-up), ``requant_metadata`` (the ``qconvert_requant`` entry's binary layout).

May import: ``qconvert.ir`` (writer only), ``qconvert.quant``, ``qconvert.errors``,
``ai_edge_litert``, ``flatbuffers``, numpy. Importing this package imports nothing: import
the module you need, so that ``run`` and ``dump`` never load the writer.
"""
