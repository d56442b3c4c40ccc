"""Recipe files (docs/converting.md, "Recipes"): the options that decide what precision each op gets,
kept in one TOML or JSON file so that a choice made once (by hand, or by ``qconvert tune``) is the
same in CI.

Our form is a table of option keys (the batch manifest's keys; which ones: ``options.py``, the
options declared ``in_recipe``) and ``version = 1``::

    version = 1
    keep_float = ['attention/Softmax']
    int16 = ['dense_1/BiasAdd', '^TANH$']

as TOML (``.toml``) or as a JSON object (``.json``). :func:`read_recipe` reads it (the keys and
their values are checked by ``options.py``, where the options are declared), :func:`write_recipe`
writes it. The LiteRT Quantizer's recipe (a JSON list of ``{"regex", "operation",
"algorithm_key", "op_config"}`` entries) is recognised by its shape and translated into the same
keys where it maps onto ours; an entry that does not is a usage error naming it.

May import: ``qconvert.io`` (atomic writes), ``qconvert.errors`` and the standard library.
"""

from __future__ import annotations

import json
import math
import os
import re
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as the tomli backport, a dependency there
    import tomli as tomllib  # type: ignore[no-redef]
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from qconvert.errors import UsageError
from qconvert.io import write_atomic

VERSION = 1  # the form this qconvert reads and writes


@dataclass(frozen=True)
class Recipe:
    """A recipe as read: option keys and their values (not yet checked), and notes for the user
    (how a LiteRT recipe was translated where it is not exact)."""

    values: dict[str, Any]
    notes: tuple[str, ...] = ()
    form: str = "qconvert"  # or "litert": the LiteRT Quantizer's JSON list
    path: str = ""


def read_recipe(path: str | os.PathLike) -> dict[str, Any]:
    """The option keys and values of the recipe at ``path`` (``version`` left out). A file that
    cannot be read, or is not a recipe, is a UsageError (exit 2) in one line naming it."""
    return load_recipe(path).values


def load_recipe(path: str | os.PathLike) -> Recipe:
    """:func:`read_recipe` with the notes and the form."""
    name = os.fspath(path)
    where = f"recipe '{name}'"
    kind = recipe_kind(name, where)
    try:
        text = Path(name).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {where}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{where} is not UTF-8 text") from None
    if kind == "toml":
        try:
            doc: Any = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"{where} is not valid TOML: {exc}") from None
    else:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{where} is not valid JSON: {exc}") from None
        if isinstance(doc, list) and doc and all(isinstance(e, Mapping) and "regex" in e for e in doc):
            values, notes = _from_litert(doc, where)
            return Recipe(values, tuple(notes), "litert", name)
        if not isinstance(doc, dict):
            raise UsageError(f"{where}: a JSON recipe is an object {{\"version\": {VERSION}, ...}} or the LiteRT "
                             f"Quantizer's list of {{\"regex\", \"operation\", ...}} entries")
    if "version" not in doc:
        raise UsageError(f"{where}: no version; add version = {VERSION} (the recipe form this qconvert reads)")
    if doc["version"] != VERSION or isinstance(doc["version"], bool):
        raise UsageError(f"{where}: version = {doc['version']!r}; this qconvert reads version {VERSION}")
    return Recipe({k: v for k, v in doc.items() if k != "version"}, (), "qconvert", name)


def write_recipe(path: str | os.PathLike, values: Mapping[str, Any], comments: Sequence[str] = ()) -> None:
    """Write ``values`` (option keys, e.g. ``{"int16": ["dense_1/BiasAdd"], "keep_float": [...]}``)
    as a recipe: TOML for ``.toml``, JSON for ``.json``, ``version = 1`` first; None values (the
    default) are left out, tuples written as lists; ``comments`` as ``#`` lines at the top of a TOML
    recipe (JSON has none). Atomic: no partial file."""
    name = os.fspath(path)
    kind = recipe_kind(name, f"recipe '{name}'")
    text = recipe_text(values, comments, kind)
    write_atomic(name, text.encode("utf-8"))


def recipe_text(values: Mapping[str, Any], comments: Sequence[str] = (), kind: str = "toml") -> str:
    """The text :func:`write_recipe` writes (``kind``: "toml" or "json")."""
    doc = {"version": VERSION, **{k: _plain(v, k) for k, v in values.items() if v is not None and k != "version"}}
    if kind == "json":
        return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    head = "".join(f"# {line}\n" for c in comments for line in str(c).splitlines())
    return head + "".join(f"{_toml_key(k)} = {_toml(v, k)}\n" for k, v in doc.items())


# ---------------------------------------------------------------------------------- writing


def recipe_kind(name: str, where: str) -> str:
    """"toml" or "json" by the file's suffix; anything else a UsageError naming ``where``."""
    suffix = Path(name).suffix.lower()
    if suffix not in (".toml", ".json"):
        raise UsageError(f"{where}: a recipe is a .toml or a .json file")
    return suffix[1:]


def _plain(v: Any, key: str) -> Any:
    if isinstance(v, (tuple, list)):
        return [_plain(x, key) for x in v]
    if isinstance(v, Mapping):
        return {str(k): _plain(x, key) for k, x in v.items()}
    if isinstance(v, (str, bool, int)) or isinstance(v, float) and math.isfinite(v):
        return v
    raise UsageError(f"write_recipe: {key} = {v!r}: a recipe holds text, numbers, true/false and lists of them")


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _toml(k, k)


def _toml(v: Any, key: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):  # a literal string where it can be (regexes keep their backslashes readable)
        if "'" not in v and not any(ord(c) < 32 or ord(c) == 127 for c in v):
            return f"'{v}'"
        return json.dumps(v, ensure_ascii=False)  # JSON's escapes are TOML basic-string escapes
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x, key) for x in v) + "]"
    return "{" + ", ".join(f"{_toml_key(k)} = {_toml(x, key)}" for k, x in v.items()) + "}"


# ---------------------------------------------------------------------------------- the LiteRT Quantizer's recipes
#
# Their form (ai_edge_quantizer / litert_quantizer, recipe_manager.py): a list of entries
# {"regex", "operation", "algorithm_key", "op_config": {"activation_tensor_config": {"num_bits",
# "symmetric", "granularity", "dtype"}, "weight_tensor_config": {...}, "compute_precision",
# "explicit_dequantize", "skip_checks", "min_weight_elements"}}. An op's scope is its output tensor
# names joined by ';' with a trailing ';' (re.search); "operation" is a TFLite op name or '*'. The
# entries go into a dict keyed by regex (a regex seen again keeps its first place; '*' replaces
# the regex's list, an op name replaces that op's entry), and the last matching entry in that
# order wins; an op no entry matches is not quantized.

MIN_MAX = "min_max_uniform_quantize"
NO_QUANTIZE = "no_quantize"
FLOAT_CASTING = "float_casting"
ANY_OP = "*"
EVERY_SCOPE = ".*"
TF_DYNAMIC_MIN_ELEMENTS = 1024  # TensorFlow's dynamic range quantizes weights of 1024 elements or more
_THEIR_OP_NAMES = {"CONV_2D_TRANSPOSE": "TRANSPOSE_CONV"}  # their names that are not TFLite's
_NOT_OPS = frozenset({"INPUT", "OUTPUT", "CUSTOM_OP", "STABLEHLO_COMPOSITE"})  # their pseudo-ops
_BLOCKWISE = {f"BLOCKWISE_{n}": n for n in (32, 64, 128, 256)}


def _from_litert(entries: list[Mapping[str, Any]], where: str) -> tuple[dict[str, Any], list[str]]:
    """Their entries → our option keys, and notes where the translation is not exact."""
    where = f"{where} (LiteRT Quantizer recipe)"
    order = _their_priority(entries, where)
    (first_i, first), rest = order[0], order[1:]
    if not _is_whole(first):
        raise UsageError(f"{where}: entry #{first_i} (regex '{first['regex']}', operation "
                         f"'{first.get('operation', ANY_OP)}') comes first, with no entry for every op before it (regex "
                         f"'{EVERY_SCOPE}', operation '{ANY_OP}'): the LiteRT Quantizer leaves the other ops float, "
                         f"qconvert quantizes the whole model; add that entry first")
    values, notes = _whole_model(first_i, first, where)
    base = _precision(first_i, first, where)
    keep_float: list[str] = []
    int16: list[str] = []
    by_name = False  # an entry chose ops by their output names
    for i, e in rest:
        if _is_whole(e):
            raise UsageError(f"{where}: entry #{i} (regex '{EVERY_SCOPE}', operation '{ANY_OP}') overrides every entry "
                             f"before it; put it first")
        kind = _precision(i, e, where)
        pattern = _pattern(i, e, where)
        by_name = by_name or e.get("operation", ANY_OP) == ANY_OP
        if kind == base:
            if keep_float or int16:
                raise UsageError(f"{where}: entry #{i} puts ops matching '{pattern}' back to the model's precision after "
                                 f"islands were chosen: qconvert's patterns cannot take ops out of an island; narrow the "
                                 f"earlier regex")
            continue  # the model's precision already
        if kind[0] == "float":
            if kind[1]:
                raise UsageError(f"{where}: entry #{i}: weight-only ({kind[1]}-bit weights, float compute) for "
                                 f"'{pattern}': qconvert writes no weight-only op; algorithm_key '{NO_QUANTIZE}' "
                                 f"keeps those ops float32 (--keep-float)")
            keep_float.append(pattern)
        elif kind[:2] == ("int", 16) and base[:2] == ("int", 8) and kind[2:4] == (8, base[3]):
            int16.append(pattern)
        else:
            raise UsageError(f"{where}: entry #{i} ({_describe(kind)} for '{pattern}') inside a model of "
                             f"{_describe(base)}: qconvert's islands are float32 (--keep-float) or 16x8 (--int16) "
                             f"inside an int8 model")
    if keep_float:
        values["keep_float"] = keep_float
    if int16:
        values["int16"] = int16
    if by_name and (keep_float or int16):
        notes.append(f"{where}: a regex entry takes the ops writing a matching tensor AND the ops reading it here "
                     f"(qconvert's rule: precision belongs to a tensor); the LiteRT Quantizer takes the writing op "
                     f"alone and requantizes its result for its readers")
    if any(";" in p for p in keep_float + int16):
        notes.append(f"{where}: a regex with ';' (their scope joins an op's output names with ';') is tried against "
                     f"each output name alone here")
    return values, notes


def _their_priority(entries: list[Mapping[str, Any]], where: str) -> list[tuple[int, Mapping[str, Any]]]:
    """The entries (numbered from 1) in the order the LiteRT Quantizer tries them (the last that matches wins)."""
    scopes: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
    for i, e in enumerate(entries, 1):
        regex, op = e.get("regex"), e.get("operation", ANY_OP)
        if not isinstance(regex, str) or not isinstance(op, str):
            raise UsageError(f"{where}: entry #{i}: 'regex' and 'operation' must be text")
        try:
            re.compile(regex)
        except re.error as exc:
            raise UsageError(f"{where}: entry #{i}: regex '{regex}' is not a regular expression ({exc})") from None
        if op == ANY_OP:
            scopes[regex] = [(i, e)]
            continue
        same = scopes.setdefault(regex, [])
        for k, (_, old) in enumerate(same):
            if old.get("operation", ANY_OP) == op:
                same[k] = (i, e)
                break
        else:
            same.append((i, e))
    return [x for same in scopes.values() for x in same]


def _is_whole(e: Mapping[str, Any]) -> bool:
    return e["regex"] == EVERY_SCOPE and e.get("operation", ANY_OP) == ANY_OP


def _pattern(i: int, e: Mapping[str, Any], where: str) -> str:
    """Our pattern for an entry's scope: its regex (searched in each output name) or its op type."""
    regex, op = e["regex"], e.get("operation", ANY_OP)
    if op in _NOT_OPS:
        raise UsageError(f"{where}: entry #{i}: operation '{op}' is not a TFLite op qconvert can choose a precision for")
    if op == ANY_OP:
        return regex[:-1] + "$" if regex.endswith(";") and not regex.endswith("\\;") else regex
    if regex == EVERY_SCOPE:
        return f"^{re.escape(_THEIR_OP_NAMES.get(op, op))}$"
    raise UsageError(f"{where}: entry #{i}: regex '{regex}' with operation '{op}': a qconvert pattern matches an output "
                     f"name or an op type, not both; use operation '*' (the ops writing a matching tensor) or regex "
                     f"'.*' (every {op})")


def _precision(i: int, e: Mapping[str, Any], where: str) -> tuple[Any, ...]:
    """What an entry asks of its ops: ("int", activation bits or None for dynamic range, weight
    bits, weight granularity) or ("float", weight-only bits or None)."""
    algo = e.get("algorithm_key", MIN_MAX)
    if algo == NO_QUANTIZE:
        return ("float", None)
    cfg = e.get("op_config") or {}
    if not isinstance(cfg, Mapping):
        raise UsageError(f"{where}: entry #{i}: op_config must be an object")
    act, w = cfg.get("activation_tensor_config"), cfg.get("weight_tensor_config")
    compute = cfg.get("compute_precision", "FLOAT")
    if algo == FLOAT_CASTING:
        if w and w.get("dtype") == "FLOAT" and w.get("num_bits") == 16 and compute == "FLOAT" and not act:
            return ("float16",)
        raise UsageError(f"{where}: entry #{i}: float_casting maps only as float16 weights with float compute")
    if algo != MIN_MAX:
        raise UsageError(f"{where}: entry #{i}: algorithm_key '{algo}' has no qconvert equivalent (qconvert reads "
                         f"'{MIN_MAX}' and '{NO_QUANTIZE}' entries)")
    wbits = _tensor(i, w, "weight_tensor_config", where) if w else None
    if compute == "FLOAT":
        return ("float", wbits[0] if wbits else None)
    if compute != "INTEGER":
        raise UsageError(f"{where}: entry #{i}: compute_precision {compute!r}: expected INTEGER or FLOAT")
    abits = _tensor(i, act, "activation_tensor_config", where) if act else None
    if abits is not None:
        if abits[1] != "TENSORWISE":
            raise UsageError(f"{where}: entry #{i}: activations {abits[1]}: TFLite activations have one scale")
        if abits[2] != (abits[0] == 16):
            raise UsageError(f"{where}: entry #{i}: {abits[0]}-bit activations with symmetric {abits[2]}: TFLite's "
                             f"{abits[0]}-bit kernels take {'symmetric' if abits[0] == 16 else 'asymmetric'} ones "
                             f"(as TensorFlow writes them)")
    if wbits is not None and not wbits[2]:
        raise UsageError(f"{where}: entry #{i}: asymmetric weights: TFLite's integer kernels take symmetric weights")
    wb, wg = (wbits[0], wbits[1]) if wbits else (8, "CHANNELWISE")
    return ("int", abits[0] if abits else None, wb, wg, cfg.get("min_weight_elements", 0))


def _tensor(i: int, t: Any, name: str, where: str) -> tuple[int, str, bool]:
    if not isinstance(t, Mapping):
        raise UsageError(f"{where}: entry #{i}: {name} must be an object")
    bits, gran, sym, dtype = t.get("num_bits", 8), t.get("granularity", "TENSORWISE"), t.get("symmetric", True), \
        t.get("dtype", "INT")
    if dtype != "INT":
        raise UsageError(f"{where}: entry #{i}: {name} dtype {dtype!r}: qconvert maps signed integers (INT)")
    if bits not in (4, 8, 16) or isinstance(bits, bool) or bits == 16 and name.startswith("weight") or \
            bits == 4 and name.startswith("activation"):
        raise UsageError(f"{where}: entry #{i}: {name} num_bits {bits!r}: qconvert has 8- and 16-bit activations, "
                         f"4- and 8-bit weights")
    return bits, str(gran), bool(sym)


def _describe(kind: tuple[Any, ...]) -> str:
    if kind[0] == "float":
        return "float32"
    if kind[0] == "float16":
        return "float16 weights"
    _, a, w, g = kind[:4]
    return (f"dynamic range (int{w} weights)" if a is None else f"int{a} activations") + \
        f" with int{w} {g.lower()} weights"


def _whole_model(i: int, e: Mapping[str, Any], where: str) -> tuple[dict[str, Any], list[str]]:
    """The entry for every op → the model's options."""
    kind = _precision(i, e, where)
    notes: list[str] = []
    if kind[0] == "float16":
        return {"activations": "float", "weights": "float16"}, notes
    if kind[0] == "float":
        raise UsageError(f"{where}: entry #{i}: every op float ({'weight-only' if kind[1] else 'not quantized'}): "
                         f"qconvert writes no such file; dynamic range is compute_precision INTEGER with no "
                         f"activation_tensor_config")
    _, abits, wbits, gran, min_elements = kind
    values: dict[str, Any] = {}
    if abits is None:  # dynamic range
        values["activations"] = "float"
        if wbits == 4:
            if gran not in _BLOCKWISE:
                raise UsageError(f"{where}: entry #{i}: dynamic range with 4-bit {gran} weights: qconvert's are "
                                 f"blockwise ({', '.join(_BLOCKWISE)})")
            values.update(weights="int4", block_size=_BLOCKWISE[gran])
        elif gran != "CHANNELWISE":
            raise UsageError(f"{where}: entry #{i}: dynamic range with {gran} 8-bit weights: qconvert's (TensorFlow's) "
                             f"are CHANNELWISE")
        if wbits == 8 and min_elements != TF_DYNAMIC_MIN_ELEMENTS:
            notes.append(f"{where}: entry #{i}: min_weight_elements {min_elements}: qconvert's dynamic range is "
                         f"TensorFlow's, which quantizes weights of {TF_DYNAMIC_MIN_ELEMENTS} elements or more (smaller "
                         f"ones stay float32)")
        return values, notes
    if abits == 16:
        values["activations"] = "int16"
    if wbits == 4:
        if gran != "CHANNELWISE":
            raise UsageError(f"{where}: entry #{i}: 4-bit {gran} weights with integer activations: qconvert's are "
                             f"CHANNELWISE")
        values["weights"] = "int4"
    elif gran == "TENSORWISE":
        values["per_tensor_weights"] = True
    elif gran != "CHANNELWISE":
        raise UsageError(f"{where}: entry #{i}: {gran} 8-bit weights with integer activations: qconvert's are "
                         f"CHANNELWISE or TENSORWISE")
    return values, notes


__all__ = ["VERSION", "Recipe", "load_recipe", "read_recipe", "write_recipe"]
