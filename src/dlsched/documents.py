"""User documents (YAML or JSON) turned into plain Python data, hostile input included.

The limits are checked before anything is built, because the failures they prevent are not exceptions:
libyaml's composer recurses in C once per nesting level (a 60 KB ``[[[[...`` segfaulted the service),
and an alias bomb (``a: &a [*b, *b, ...]``) expands to gigabytes from a few hundred bytes. So a first pass
over libyaml's event stream (a state machine: no recursion, nothing expanded) refuses aliases, nesting
deeper than ``MAX_DEPTH`` and more than ``MAX_NODES`` nodes; only then is the document built, by a loader
that refuses duplicate keys (YAML's last-one-wins would hide a typo). JSON gets the same rules.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from dlsched.errors import UserError

MAX_DOCUMENT_BYTES = 1 << 20   # a job spec is a few hundred bytes; 1 MiB is a generous ceiling
MAX_DEPTH = 32                 # a job spec nests 2 deep; a workload file 4
MAX_NODES = 100_000            # scalars + collections in one document

# libyaml's parser is ~20x faster than the pure-Python one and has the same safe semantics
_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DocumentError(UserError):
    """A document that cannot be read as data (one line naming the source)."""


class _UniqueKeyLoader(_BaseLoader):
    """Safe loader whose mappings refuse a key given twice."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {str(key)[:40]!r}", key_node.start_mark)
                    seen.add(key)
                except TypeError:   # unhashable key: the base class names it
                    break
        return super().construct_mapping(node, deep)


def _line(mark) -> str:
    return f"line {mark.line + 1}: " if mark is not None else ""


def _scan_yaml(text: str, source: str) -> None:
    """Refuse aliases, deep nesting and huge documents from the event stream, before building anything."""
    depth = nodes = 0
    for ev in yaml.parse(text, Loader=_BaseLoader):
        if isinstance(ev, yaml.AliasEvent):
            raise DocumentError(f"{source}: {_line(ev.start_mark)}YAML aliases (*{str(ev.anchor)[:40]}) are not accepted")
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise DocumentError(f"{source}: {_line(ev.start_mark)}nested deeper than {MAX_DEPTH} levels")
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        if isinstance(ev, yaml.NodeEvent):
            nodes += 1
            if nodes > MAX_NODES:
                raise DocumentError(f"{source}: {_line(ev.start_mark)}more than {MAX_NODES} values")


def _check_json_shape(doc: Any, source: str) -> None:
    """Depth and size of parsed JSON, iteratively (the document may be as deep as the parser allowed)."""
    stack, nodes = [(doc, 1)], 0
    while stack:
        x, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise DocumentError(f"{source}: more than {MAX_NODES} values")
        if isinstance(x, (dict, list)):
            if depth > MAX_DEPTH:
                raise DocumentError(f"{source}: nested deeper than {MAX_DEPTH} levels")
            stack.extend((v, depth + 1) for v in (x.values() if isinstance(x, dict) else x))


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict:
    out = {}
    for k, v in pairs:
        if k in out:
            raise DocumentError(f"duplicate key {k[:40]!r}")
        out[k] = v
    return out


def _no_constant(name: str):
    raise DocumentError(f"{name} is not a number JSON allows")


def decode(data: bytes | str, source: str, limit: int = MAX_DOCUMENT_BYTES) -> str:
    """Bytes -> text, refusing oversized or non-UTF-8 input with one line."""
    if len(data) > limit:
        raise DocumentError(f"{source}: document is {len(data)} {'bytes' if isinstance(data, bytes) else 'characters'}, "
                            f"limit is {limit}")
    if isinstance(data, bytes):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DocumentError(f"{source}: not UTF-8 (byte {e.start}: {data[e.start:e.start + 1]!r})") from None
    return data


def load_document(data: bytes | str, source: str, fmt: str | None = None, limit: int = MAX_DOCUMENT_BYTES) -> Any:
    """Bytes/str -> plain Python data within the limits above. YAML is a superset of JSON, so YAML parses both;
    ``fmt='json'`` keeps JSON strict (no YAML surprises such as ``no`` -> False)."""
    text = decode(data, source, limit)
    try:
        if fmt == "json":
            doc = json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=_no_constant)
            _check_json_shape(doc, source)
            return doc
        _scan_yaml(text, source)
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except DocumentError as e:
        msg = str(e)
        raise DocumentError(msg if msg.startswith(f"{source}: ") else f"{source}: {msg}") from None
    except json.JSONDecodeError as e:
        raise DocumentError(f"{source}: line {e.lineno} column {e.colno}: invalid JSON: {e.msg}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise DocumentError(f"{source}: {_line(mark)}invalid YAML: {problem}") from None
    except RecursionError:   # JSON deeper than the interpreter's recursion limit (~1000)
        raise DocumentError(f"{source}: nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, OverflowError) as e:   # huge int literals
        raise DocumentError(f"{source}: unreadable document: {str(e).splitlines()[0][:80]}") from None


def read_yaml_file(path: str | Path, limit: int = MAX_DOCUMENT_BYTES) -> Any:
    """A YAML (or JSON) file's document within the limits above; an unreadable file or bad document is one
    ``DocumentError`` line naming the file (and the line)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:   # at most one byte past the limit: a FIFO or /dev/zero has no size
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise DocumentError(f"{path}: file not found") from None
    except OSError as e:
        raise DocumentError(f"{path}: cannot read: {e.strerror}") from None
    return load_document(data, str(path), limit=limit)
