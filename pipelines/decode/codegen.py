"""Record decoders generated as Python source: one straight-line function per struct and version.

Why: a tree of closures (one per field) costs a call, a tuple and a loop step per field, and
group-record-heavy logs (KIP-848 writes a record per member, epoch and assignment change) decode
millions of fields. Kafka generates its coordinator record readers from the JSON specs; we do the
same at run time: fixed-width integers are read inline, arrays of integers with one ``unpack``,
and an empty tagged-field section with one byte test.

The generated code performs exactly the checks of the closure tree it replaced (kept as the
oracle in ``tests/support/codec_oracle.py``), in the same order, with the same error messages,
and builds dicts with the same keys in the same order.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from collections.abc import Callable
from itertools import count
from typing import TYPE_CHECKING, Any

from pipelines.decode import wire
from pipelines.decode.wire import WireError

if TYPE_CHECKING:
    from pipelines.decode.formats import FieldSpec

Decoder = Callable[[bytes, int], tuple[Any, int]]

# Wire details kept in decoded dicts (underscore-prefixed) so re-encoding is byte-exact.
UNKNOWN_TAGS = "_unknown_tagged_fields"
TAGS_ABSENT = "_tagged_section_absent"
EXPLICIT_DEFAULT_TAGS = "_tags_written_at_default"

#: the tails (and their size) each value decoder remembers (:meth:`_Generator.memoized_tail`):
#: ~15 MB at most per decoder (measured), for a log whose tails are all as long as kept and
#: distinct; a member's assignment of a few topics takes ~50-300 bytes
TAIL_MEMO_SIZE = 1024
TAIL_MEMO_BYTES = 512

#: type -> (struct format character, size) of the fixed-width integers.
_INTS = {"int8": ("b", 1), "int16": ("h", 2), "uint16": ("H", 2), "int32": ("i", 4),
         "int64": ("q", 8)}


def read_tagged(buf: bytes, pos: int, tagged: dict[int, tuple[str, Any, Decoder]],
                out: dict) -> int:
    """A tagged-field section: known tags decoded into ``out``, unknown ones kept as bytes."""
    count_, pos = wire.read_uvarint(buf, pos)
    last_tag = -1
    for _ in range(count_):
        tag, pos = wire.read_uvarint(buf, pos)
        size, pos = wire.read_uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise WireError(f"tagged field {tag} runs past the end")
        if tag <= last_tag:
            raise WireError(f"tagged fields out of order: {tag} after {last_tag}")
        last_tag = tag
        known = tagged.get(tag)
        chunk = bytes(buf[pos:end])
        if known is None:
            out.setdefault(UNKNOWN_TAGS, {})[tag] = chunk
        else:
            name, default, dec = known
            value, used = dec(chunk, 0)
            if used != size:
                raise WireError(f"tagged field {name} used {used} of {size} bytes")
            out[name] = value
            if value == default:  # some Kafka versions write defaults (e.g. 4.0 nulls)
                out.setdefault(EXPLICIT_DEFAULT_TAGS, []).append(tag)
        pos = end
    return pos


def struct_decoder(fields: tuple[FieldSpec, ...], version: int, flexible: bool,
                   top_level: bool = False) -> Decoder:
    """The decoder of ``fields`` at ``version`` (see ``StructCodec.compile`` for the rules)."""
    gen = _Generator()
    name = gen.struct(fields, version, flexible, top_level)
    return gen.build(name)


def _fixed_head(present: list[FieldSpec], flexible: bool) -> int:
    """How many leading fields of a value are plain fixed-width integers, when an array or a
    struct follows them (0 otherwise: nothing worth remembering). A tagged or optional
    trailing field ends the head."""
    head = 0
    while head < len(present) and present[head].type in _INTS and present[head].tag is None \
            and not present[head].optional_trailing:
        head += 1
    tail = [f for f in present[head:] if f.tag is None or flexible]
    worth = any(f.type.startswith("[]") or f.type == "struct" for f in tail)
    return head if head and worth else 0


class _Generator:
    """Collects generated functions and the constants they refer to in one namespace."""

    def __init__(self) -> None:
        self.ns: dict[str, Any] = {
            "WireError": WireError, "unpack_from": struct.unpack_from,
            "read_uvarint": wire.read_uvarint, "read_string": wire.read_string,
            "read_compact_string": wire.read_compact_string, "read_bytes": wire.read_bytes,
            "read_compact_bytes": wire.read_compact_bytes, "uuid_to_str": wire.uuid_to_str,
            "read_tagged": read_tagged, "TAGS_ABSENT": TAGS_ABSENT, "lru_cache": functools.lru_cache,
        }
        for ftype, (char, _size) in _INTS.items():
            self.ns[f"u_{ftype}"] = struct.Struct(">" + char).unpack_from
        self.sources: list[str] = []
        self.ids = count()

    def const(self, value: Any) -> str:
        name = f"c{next(self.ids)}"
        self.ns[name] = value
        return name

    def build(self, name: str) -> Decoder:
        """Define the functions generated since the last build; ``name``'s function."""
        if self.sources:
            source, self.sources = "\n\n".join(self.sources), []
            exec(compile(source, f"<decoder {name}>", "exec"), self.ns)
        return self.ns[name]

    def function(self, prefix: str, body: list[str]) -> str:
        name = f"{prefix}{next(self.ids)}"
        self.sources.append("\n".join([f"def {name}(buf, pos):", "    nb = len(buf)",
                                       *("    " + line for line in body)]))
        return name

    # ------------------------------------------------------------------------- structs

    def struct(self, fields: tuple[FieldSpec, ...], version: int, flexible: bool,
               top_level: bool) -> str:
        present = [f for f in fields if version in f.versions]
        head = _fixed_head(present, flexible)
        if top_level and head:
            return self.memoized_tail(present, head, version, flexible)
        return self.function("s", self.struct_body(present, version, flexible, top_level))

    def memoized_tail(self, present: list[FieldSpec], head: int, version: int,
                      flexible: bool) -> str:
        """A value whose leading fields are fixed-width integers (epochs, states) and the
        rest collections: the head read inline, the rest decoded once per distinct tail
        bytes (the last :data:`TAIL_MEMO_SIZE` of up to :data:`TAIL_MEMO_BYTES` each) and
        shared, read-only like every value the decoder shares.

        Why: a KIP-848 member's current assignment is rewritten at every epoch with the
        same partitions; on a group-heavy history 69k distinct values of that type hold
        149 distinct tails. The rest's fields follow the head's in the dict, as the plain
        decoder orders them. A tail that does not decode is decoded again in place, so that
        it fails as it always did, its message naming its position in the value (a failure
        is never remembered)."""
        rest = self.function("r", self.struct_body(present[head:], version, flexible, True))
        memo = f"m{next(self.ids)}"
        self.sources.append(f"{memo} = lru_cache(maxsize={TAIL_MEMO_SIZE})(lambda tail: {rest}(tail, 0))")
        body = ["out = {}"]
        for f in present[:head]:
            body.extend(self.fixed(f.type, f"out[{f.name!r}]"))
        body += [f"if nb - pos > {TAIL_MEMO_BYTES}:", f"    rest, end = {rest}(buf, pos)",
                 "else:", "    try:", f"        rest, used = {memo}(bytes(buf[pos:]))",
                 "    except Exception:  # fails again, in place",
                 f"        rest, end = {rest}(buf, pos)", "    else:", "        end = pos + used",
                 "out.update(rest)", "return out, end"]
        return self.function("s", body)

    def struct_body(self, present: list[FieldSpec], version: int, flexible: bool,
                    top_level: bool) -> list[str]:
        """The lines decoding ``present`` into a new dict ``out`` (its tagged-field section
        after them when ``flexible``), returning ``out, pos``."""
        body = ["out = {}"]
        tagged: dict[int, tuple[str, Any, Decoder]] = {}
        for f in present:
            target = f"out[{f.name!r}]"
            if f.tag is not None and flexible:
                default = self.const(f.default)
                body.append(f"{target} = list({default})" if isinstance(f.default, list)
                            else f"{target} = {default}")
                tagged[f.tag] = (f.name, f.default, self.field_decoder(f, version, flexible, True))
            elif f.tag is not None:  # a tagged field in a non-flexible version: never read
                body.append(f"raise KeyError({f.name!r})")
            elif f.optional_trailing:
                body.append(f"if nb - pos <= {1 if flexible else 0}:")
                body.append(f"    {target} = None")
                body.append("else:")
                body.extend("    " + line for line in self.read(f, version, flexible, False,
                                                                target))
            else:
                body.extend(self.read(f, version, flexible, False, target))
        if flexible:
            tags = self.const(tagged)
            section = ["if pos < nb and buf[pos] == 0:", "    pos += 1", "else:",
                       f"    pos = read_tagged(buf, pos, {tags}, out)"]
            if top_level:
                body.extend(["if pos == nb:", "    out[TAGS_ABSENT] = True", "else:",
                             *("    " + line for line in section)])
            else:
                body.extend(section)
        body.append("return out, pos")
        return body

    def field_decoder(self, spec: FieldSpec, version: int, flexible: bool,
                      tagged: bool = False) -> Decoder:
        """One field's decoder as a function of its own (tagged fields, array elements)."""
        if spec.type == "struct" and not spec.nullable:
            return self.build(self.struct(spec.fields, version, flexible, False))
        if spec.type == "string" and not spec.nullable:
            return wire.read_compact_string if flexible else wire.read_string
        body = [*self.read(spec, version, flexible, tagged, "v"), "return v, pos"]
        return self.build(self.function("f", body))

    # ------------------------------------------------------------------------- fields

    def read(self, spec: FieldSpec, version: int, flexible: bool, tagged: bool,
             target: str) -> list[str]:
        """Lines reading one field into ``target`` and advancing ``pos``."""
        ftype, nullable = spec.type, spec.nullable
        if ftype in _INTS:
            return self.fixed(ftype, target)
        if ftype == "uuid":
            return ["if pos + 16 > nb:",
                    "    raise WireError(f'need 16 bytes at {pos}, have {nb - pos}')",
                    f"{target} = uuid_to_str(bytes(buf[pos:pos + 16]))", "pos += 16"]
        if ftype == "string":
            return self.string(flexible, nullable, target)
        if ftype == "bytes":
            return self.bytes_(flexible, nullable, target)
        if ftype == "struct":
            fn = self.struct(spec.fields, version, flexible, False)
            if not nullable:
                return [f"{target}, pos = {fn}(buf, pos)"]
            marker = f"m{next(self.ids)}"
            if tagged:  # Kafka writes an unsigned varint 0/1 inside a tagged field
                head = [f"{marker}, pos = read_uvarint(buf, pos)", f"if {marker} == 0:"]
            else:  # and an int8 -1/1 for a regular field
                head = [*self.fixed("int8", marker), f"if {marker} < 0:"]
            return [*head, f"    {target} = None", "else:", f"    {target}, pos = {fn}(buf, pos)"]
        if ftype.startswith("[]"):
            return self.array(spec, version, flexible, target)
        raise ValueError(f"unknown field type {ftype!r} for {spec.name}")

    def string(self, flexible: bool, nullable: bool, target: str) -> list[str]:
        """``wire.read_compact_string`` / ``wire.read_string`` inline (same checks, same
        messages)."""
        k = next(self.ids)
        n, end, exc = f"n{k}", f"end{k}", f"exc{k}"
        if flexible:
            lines = ["if pos < nb and buf[pos] < 0x80:", f"    {n} = buf[pos]", "    pos += 1",
                     "else:", f"    {n}, pos = read_uvarint(buf, pos)", f"if {n} == 0:"]
            lines += [f"    {target} = None"] if nullable else [
                "    raise WireError('null in a non-nullable compact string')"]
            lines += ["else:", f"    {end} = pos + {n} - 1", f"    if {end} > nb:",
                      f"        raise WireError(f'need {{{n} - 1}} bytes at {{pos}}, "
                      f"have {{nb - pos}}')"]
        else:
            lines = ["if pos + 2 > nb:",
                     "    raise WireError(f'need 2 bytes at {pos}, have {nb - pos}')",
                     f"{n} = u_int16(buf, pos)[0]", "pos += 2", f"if {n} < 0:"]
            lines += [f"    if {n} != -1:",
                      f"        raise WireError(f'negative string length {{{n}}}')",
                      f"    {target} = None"] if nullable else [
                f"    raise WireError(f'negative string length {{{n}}}')"]
            lines += ["else:", f"    {end} = pos + {n}", f"    if {end} > nb:",
                      f"        raise WireError(f'need {{{n}}} bytes at {{pos}}, "
                      f"have {{nb - pos}}')"]
        return [*lines, "    try:", f"        {target} = str(buf[pos:{end}], 'utf-8')",
                f"    except UnicodeDecodeError as {exc}:",
                f"        raise WireError(f'invalid UTF-8: {{{exc}}}') from None",
                f"    pos = {end}"]

    def bytes_(self, flexible: bool, nullable: bool, target: str) -> list[str]:
        """``wire.read_compact_bytes`` / ``wire.read_bytes`` inline (same checks, same
        messages)."""
        k = next(self.ids)
        n, end = f"n{k}", f"end{k}"
        if flexible:
            lines = [f"{n}, pos = read_uvarint(buf, pos)", f"if {n} == 0:"]
            lines += [f"    {target} = None"] if nullable else [
                "    raise WireError('null in non-nullable compact bytes')"]
            lines += ["else:", f"    {n} -= 1"]
        else:
            lines = [*self.fixed("int32", n), f"if {n} < 0:"]
            lines += [f"    if {n} != -1:",
                      f"        raise WireError(f'negative bytes length {{{n}}}')",
                      f"    {target} = None"] if nullable else [
                f"    raise WireError(f'negative bytes length {{{n}}}')"]
            lines += ["else:"]
        return [*lines, f"    {end} = pos + {n}", f"    if {end} > nb:",
                f"        raise WireError(f'need {{{n}}} bytes at {{pos}}, have {{nb - pos}}')",
                f"    {target} = bytes(buf[pos:{end}])", f"    pos = {end}"]

    def fixed(self, ftype: str, target: str) -> list[str]:
        size = _INTS[ftype][1]
        return [f"if pos + {size} > nb:",
                f"    raise WireError(f'need {size} bytes at {{pos}}, have {{nb - pos}}')",
                f"{target} = u_{ftype}(buf, pos)[0]", f"pos += {size}"]

    def array(self, spec: FieldSpec, version: int, flexible: bool, target: str) -> list[str]:
        elem_spec = dataclasses.replace(spec, type=spec.type[2:], nullable=False, default=None,
                                        tag=None, optional_trailing=False, embedded=None)
        k = next(self.ids)
        n, items = f"n{k}", f"items{k}"
        if flexible:
            lines = [f"{n}, pos = read_uvarint(buf, pos)", f"{n} -= 1"]
        else:
            lines = self.fixed("int32", n)
        lines += [f"if {n} < 0:"]
        if spec.nullable:
            lines += [f"    if {n} != -1:",
                      f"        raise WireError(f'negative array length {{{n}}}')",
                      f"    {target} = None"]
        else:
            lines += [f"    raise WireError(f'negative array length {{{n}}}')"]
        lines += ["else:",
                  f"    if {n} > nb - pos:  # every element takes at least one byte",
                  f"        raise WireError(f'array of {{{n}}} elements cannot fit in "
                  f"{{nb - pos}} bytes')"]
        elem = self.const(self.field_decoder(elem_spec, version, flexible))
        loop = [f"{items} = []", f"for _ in range({n}):", f"    item, pos = {elem}(buf, pos)",
                f"    {items}.append(item)", f"{target} = {items}"]
        if elem_spec.type in _INTS:  # all elements at once when they fit (else: the same
            char, size = _INTS[elem_spec.type]  # element-wise loop and its error)
            lines += [f"    if pos + {size} * {n} <= nb:",
                      f"        {target} = list(unpack_from('>%d{char}' % {n}, buf, pos))",
                      f"        pos += {size} * {n}",
                      "    else:", *("        " + line for line in loop)]
        else:
            lines += ["    " + line for line in loop]
        return lines
