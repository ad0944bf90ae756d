#!/usr/bin/env python3
"""Rewrites a CUDA source of cuda/ into C++ for the CPU emulator
(tests/cuda_emu/emu.cpp): kernel launches become emulator calls and the
dynamic shared-memory declaration becomes a pointer to the emulator's
block buffer. Everything else compiles as it is against the stand-in
cuda_runtime.h. Usage: translate.py IN.cu OUT.cpp"""
import re
import sys


def split_top(s):
    """Split at commas outside parentheses, brackets and braces."""
    parts, depth, cur = [], 0, ''
    for ch in s:
        if ch in '([{':
            depth += 1
        elif ch in ')]}':
            depth -= 1
        if ch == ',' and depth == 0:
            parts.append(cur.strip())
            cur = ''
        else:
            cur += ch
    parts.append(cur.strip())
    return parts


def launch(m):
    kernel, config, args = m.group(1), split_top(m.group(2)), m.group(3)
    if len(config) < 2:
        sys.exit(f'translate.py: launch of {kernel} without grid and block')
    grid, block = config[0], config[1]
    smem = config[2] if len(config) > 2 else '0'
    stream = config[3] if len(config) > 3 else '0'
    return (f'((void)({stream}), emu_launch_closure(dim3({grid}), dim3({block}), (size_t)({smem}), '
            f'(const void *)&{kernel}, [&]() {{ {kernel}({args}); }}));')


def main():
    src = open(sys.argv[1]).read()
    out, n = re.subn(r'([A-Za-z_]\w*(?:<[^<>;]*>)?)\s*<<<(.*?)>>>\s*\((.*?)\)\s*;', launch, src, flags=re.S)
    out, m = re.subn(r'extern\s+__shared__\s+float\s+(\w+)\s*\[\s*\]\s*;', r'float *\1 = (float *)emu_dynamic_smem();',
                     out)
    if '<<<' in out:
        sys.exit(f'translate.py: a launch in {sys.argv[1]} was not rewritten')
    with open(sys.argv[2], 'w') as f:
        f.write(f'// generated from {sys.argv[1]} by tests/cuda_emu/translate.py: {n} launches\n#line 1 "{sys.argv[1]}"\n')
        f.write(out)


main()
