#!/usr/bin/env python3
"""The struct half of the ABI check (docs/ABI.md): every public struct of
include/rlpost.h and every field, nested ones too, with its offset and size.
A header is read with the headers of include/rlpost/ that it includes
(`#include "rlpost/NAME.h"`) put in their place, in its order.

  struct_layout.py probe HEADER... OUT.c
      writes the C program tests/abi "abi_struct_layout" runs: it prints, or
      compares against tests/abi/struct_layout.txt, sizeof and offsetof of
      every field the header declares. The field list comes from the header
      itself, so a new field or struct cannot be left out of the table; a
      struct body this parser cannot read fails the build instead of being
      skipped.
  struct_layout.py check HEADER TABLE ABIXML
      the test "abi_tables_agree": the header's structs, the table's and the
      abidw baseline's (tests/abi/librlpost.abi) are the same set, and the
      baseline records the same sizes and offsets as the table — so the
      abidiff check really covers every struct layout, and neither baseline
      can be moved without the other.

  struct_layout.py refuses HEADER
      the test "abi_layout_refuses": exit 0 only if HEADER is refused.

Standard library only: it runs in the build (meson's own Python).
"""
import os
import re
import sys
import xml.etree.ElementTree as ET

# A public struct: `typedef struct rlp_x { ... } rlp_x;` (the body is found
# by matching braces). A field whose type is one of them, held by value, is
# spelled out field by field; any other type is a scalar to this script
# (its size still comes from the compiler).
_STRUCT_RE = re.compile(r"typedef\s+struct\s+(rlp_\w+)\s*\{")


def read_header(path, seen=None):
    """The text of a public header with each `#include "rlpost/NAME.h"` line
    replaced by that header's text (recursively, each header once), so that
    rlpost.h reads as the one header it was before the split."""
    seen = set() if seen is None else seen
    here = os.path.dirname(os.path.abspath(path))
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r'\s*#\s*include\s+"(rlpost/[A-Za-z0-9_]+\.h)"', line)
            if not m:
                out.append(line)
                continue
            sub = os.path.join(here, m.group(1))
            if not os.path.isfile(sub):  # from a header inside rlpost/: its folder's parent
                sub = os.path.join(os.path.dirname(here), m.group(1))
            sub = os.path.normpath(sub)
            if sub in seen:
                continue
            seen.add(sub)
            out.append(read_header(sub, seen))
    return "".join(out)


def strip_comments(src):
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", " ", src)


def parse_structs(src):
    """{name: [(field, base_type, is_pointer, array_len_or_None)]} in declaration
    order. Raises ValueError on anything it does not understand, so that the
    table can never silently miss a struct or a field."""
    src = strip_comments(src)
    structs = {}
    for m in _STRUCT_RE.finditer(src):
        name = m.group(1)
        # the body ends at the brace that closes this one (not at the first
        # `}`: a nested body must be seen, and refused, below)
        depth, i = 1, m.end()
        while depth and i < len(src):
            depth += {"{": 1, "}": -1}.get(src[i], 0)
            i += 1
        body = src[m.end():i - 1]
        tail = re.match(r"\s*(\w+)\s*;", src[i:])
        alias = tail.group(1) if tail else None
        if alias != name:
            raise ValueError("typedef struct %s { } %s: the typedef name differs from the tag" % (name, alias))
        if re.search(r"\b(struct|union|enum)\b|[{}]", body):
            raise ValueError("%s: nested struct/union/enum definition; teach tests/abi/struct_layout.py "
                             "to read it" % name)
        fields = []
        for decl in body.split(";"):
            decl = " ".join(decl.split())
            if not decl:
                continue
            fp = re.match(r"^.*\(\s*\*\s*(\w+)\s*\)\s*\(.*\)$", decl)
            if fp:  # function pointer
                fields.append((fp.group(1), "fnptr", True, None))
                continue
            m2 = re.match(r"^((?:const\s+|volatile\s+|unsigned\s+|signed\s+)*\w+)\s+(.*)$", decl)
            if not m2:
                raise ValueError("%s: cannot read the field declaration %r" % (name, decl))
            base = re.sub(r"\b(const|volatile)\s+", "", m2.group(1)).strip()
            for d in m2.group(2).split(","):
                pointer = "*" in d
                d = re.sub(r"\b(const|volatile)\b", "", d.replace("*", "")).strip()
                arr = re.match(r"^(\w+)\s*\[\s*(\w+)\s*\]$", d)
                n = None
                if arr:
                    d, n = arr.group(1), arr.group(2)
                if not re.match(r"^\w+$", d):
                    raise ValueError("%s: cannot read the declarator %r in %r" % (name, d, decl))
                fields.append((d, base, pointer, n))
        if not fields:
            raise ValueError("%s: no fields read" % name)
        structs[name] = fields
    # every struct body of the header must have been read above: count the
    # bodies independently of the regex that reads them
    bodies = re.findall(r"\b(?:struct|union)\s*\w*\s*\{", src)
    if len(bodies) != len(structs):
        raise ValueError("the header has %d struct/union bodies, %d were read as `typedef struct rlp_x {...} "
                         "rlp_x;`; teach tests/abi/struct_layout.py the other form" % (len(bodies), len(structs)))
    return structs


def layout_rows(structs):
    """[(struct, member designator)] for every struct ("-" for the whole
    struct) and every field, with the fields of a struct held by value
    spelled out (outer.inner, arr[0].inner)."""
    rows = []

    def walk(top, prefix, sname, depth):
        if depth > 8:
            raise ValueError("%s: structs nested deeper than 8" % top)
        for field, base, pointer, n in structs[sname]:
            desig = prefix + field
            rows.append((top, desig))
            if base in structs and not pointer:
                walk(top, desig + ("[0]." if n else "."), base, depth + 1)

    for name in structs:
        rows.append((name, "-"))
        walk(name, "", name, 0)
    return rows


def write_probe(headers, out):
    src = "".join(read_header(h) for h in headers)
    rows = layout_rows(parse_structs(src))
    lines = [
        "/* Generated by tests/abi/struct_layout.py from %s: do not edit. */" % headers[0],
        "#include <stddef.h>",
        "#include \"%s\"" % headers[0].replace("\\", "/").rsplit("/", 1)[-1],
        "#include \"layout_probe.h\"",
        "",
        "const struct layout_row layout_rows[] = {",
    ]
    for s, d in rows:
        if d == "-":
            lines.append('    { "%s", "-", 0, sizeof(%s) },' % (s, s))
        else:
            lines.append('    { "%s", "%s", offsetof(%s, %s), sizeof(((const %s *)0)->%s) },' % (s, d, s, d, s, d))
    lines += ["};", "const size_t layout_n_rows = sizeof layout_rows / sizeof layout_rows[0];", ""]
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def read_table(path):
    """{(struct, field): (offset, size)} of struct_layout.txt."""
    table = {}
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 4:
                raise ValueError("%s:%d: want `struct field offset size`, got %r" % (path, i, line))
            table[(parts[0], parts[1])] = (int(parts[2]), int(parts[3]))
    return table


def check(header, table_path, abixml):
    problems = []
    structs = parse_structs(read_header(header))
    table = read_table(table_path)
    in_table = {s for s, _ in table}
    for s in sorted(set(structs) - in_table):
        problems.append("%s: a struct of the header, not in %s" % (s, table_path))
    for s in sorted(in_table - set(structs)):
        problems.append("%s: in %s, not a struct of the header" % (s, table_path))
    want_rows = set(layout_rows(structs))
    for key in sorted(want_rows - set(table)):
        problems.append("%s %s: a field of the header, not in the table" % key)

    root = ET.parse(abixml).getroot()
    in_abi = {}
    for cd in root.iter("class-decl"):
        name = cd.get("name")
        if not name.startswith("rlp_") or cd.get("is-declaration-only") == "yes":
            continue
        members = {}
        for dm in cd.iter("data-member"):
            var = dm.find("var-decl")
            members[var.get("name")] = int(dm.get("layout-offset-in-bits")) // 8
        in_abi[name] = (int(cd.get("size-in-bits")) // 8, members)
    for s in sorted(structs):
        if s not in in_abi:
            problems.append("%s: not in the abidw baseline %s (no layout: abidiff cannot see it change)"
                            % (s, abixml))
            continue
        size, members = in_abi[s]
        if (s, "-") in table and table[(s, "-")][1] != size:
            problems.append("%s: size %d in the table, %d in the abidw baseline" % (s, table[(s, "-")][1], size))
        for field, _, _, _ in structs[s]:
            t = table.get((s, field))
            if field not in members:
                problems.append("%s.%s: not in the abidw baseline" % (s, field))
            elif t and t[0] != members[field]:
                problems.append("%s.%s: offset %d in the table, %d in the abidw baseline"
                                % (s, field, t[0], members[field]))
    for s in sorted(set(in_abi) - set(structs)):
        problems.append("%s: in the abidw baseline, not a struct of the header" % s)
    if problems:
        print("\n".join(problems))
        print("%d problem(s); move both baselines on purpose with `ninja -C build abi-update` (docs/ABI.md)"
              % len(problems))
        return 1
    print("%d structs, %d table rows: header, table and abidw baseline agree"
          % (len(structs), len(table)))
    return 0


def main(argv):
    if len(argv) >= 3 and argv[0] == "probe":
        write_probe(argv[1:-1], argv[-1])
        return 0
    if len(argv) == 4 and argv[0] == "check":
        return check(*argv[1:])
    if len(argv) == 2 and argv[0] == "refuses":  # the test abi_layout_refuses
        try:
            parse_structs(read_header(argv[1]))
        except ValueError as e:
            print("refused, as it must be: %s" % e)
            return 0
        print("%s was read although its struct bodies cannot be listed field by field" % argv[1])
        return 1
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ValueError as e:
        sys.stderr.write("struct_layout.py: %s\n" % e)
        sys.exit(1)
