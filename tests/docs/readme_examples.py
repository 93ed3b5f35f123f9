#!/usr/bin/env python3
"""README examples are tests: runs every shell example of README.md, and of docs/*.md those
marked to run, in file order in one scratch folder, and fails if any exits non-zero.

Usage: readme_examples.py STRATA_BIN SOURCE_DIR [--files MD...] [-- MPIEXEC [MPI FLAGS...]]

What is an example: every ```sh block of README.md; in docs/*.md, a ```sh block with
<!-- example: run --> on a line before it. Each line of a block is one command (a line ending
in a backslash continues on the next); blank lines and lines that are only a comment are none.

How it runs: with bash, in README order and then docs/ in name order, all in one scratch
folder (later examples use what earlier ones made: data prepare -> train -> export), which
holds links to the source tree's scripts/ and configs/. `strata` on PATH is the build's
binary; `mpirun` on PATH is the MPI launcher with the flags the README asks for on a shared
test machine (--oversubscribe --mca mpi_yield_when_idle 1, and --allow-run-as-root as root:
the flags CMake gives every MPI test).

Directives, HTML comments on the lines just before a block's opening fence (a reader of the
rendered file does not see them), each with the reason, which this script prints:
  <!-- example: skip: REASON -->                  the block is not run
  <!-- example: skip "TEXT": REASON -->           its commands containing TEXT are not run
  <!-- example: append "TEXT" "ARGS": REASON -->  its commands containing TEXT run with ARGS
                                                  appended: the reduced size (strata takes the
                                                  last of a repeated flag, so ARGS win)
Nothing is skipped or changed silently: every command is listed as run (with what was
appended) or skipped (with the reason), and a directive that matches no command fails the
test, so a marker cannot outlive its example.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

DIRECTIVE = re.compile(r'<!--\s*example:\s*(.*?)\s*-->')
SKIP_ALL = re.compile(r'^skip:\s*(.+)$')
SKIP_SOME = re.compile(r'^skip\s+"([^"]+)":\s*(.+)$')
APPEND = re.compile(r'^append\s+"([^"]+)"\s+"([^"]+)":\s*(.+)$')


class Example:
    def __init__(self, origin, command):
        self.origin = origin      # "README.md:52"
        self.command = command    # as written, continuation lines joined
        self.skip = None          # reason, when not run
        self.append = ''          # arguments added for the reduced size
        self.why_append = ''


def blocks(path):
    """(line number of the fence, directives before it, the block's lines) for each ```sh block."""
    lines = open(path, encoding='utf-8').read().split('\n')
    out = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == '```sh':
            directives = []
            j = i - 1
            while j >= 0 and DIRECTIVE.search(lines[j]):
                directives.insert(0, DIRECTIVE.search(lines[j]).group(1))
                j -= 1
            k = i + 1
            while k < len(lines) and lines[k].strip() != '```':
                k += 1
            out.append((i + 1, directives, lines[i + 1:k]))
            i = k
        i += 1
    return out


def commands(first_line, body):
    """(line number, command) for each command of a block, backslash continuations joined."""
    out, pending, start = [], '', None
    for n, line in enumerate(body, start=first_line + 1):
        if start is None:
            if not line.strip() or line.strip().startswith('#'):
                continue
            start = n
        if line.rstrip().endswith('\\'):
            pending += line.rstrip()[:-1] + ' '
            continue
        out.append((start, pending + line))
        pending, start = '', None
    if start is not None:
        sys.exit(f'{first_line}: a block ends inside a continued command')
    return out


def collect(path, name, opt_in):
    examples, problems = [], []
    for fence, directives, body in blocks(path):
        if opt_in and 'run' not in directives:
            continue
        cmds = [Example(f'{name}:{n}', c) for n, c in commands(fence, body)]
        for d in directives:
            if d == 'run':
                continue
            used = False
            if m := SKIP_ALL.match(d):
                for e in cmds:
                    e.skip = m.group(1)
                used = bool(cmds)
            elif m := SKIP_SOME.match(d):
                for e in cmds:
                    if m.group(1) in e.command:
                        e.skip, used = m.group(2), True
            elif m := APPEND.match(d):
                for e in cmds:
                    if m.group(1) in e.command and e.skip is None:
                        e.append = (e.append + ' ' + m.group(2)).strip()
                        e.why_append, used = m.group(3), True
            else:
                problems.append(f'{name}:{fence}: directive not understood: <!-- example: {d} -->')
                continue
            if not used:
                problems.append(f'{name}:{fence}: <!-- example: {d} --> matches no command of its block')
        examples += cmds
    return examples, problems


def without_comment(command):
    """The command without a trailing '# ...' comment, so that appended arguments come before it."""
    return re.sub(r'\s+#\s.*$', '', command)


def main():
    args = sys.argv[1:]
    mpi = []
    if '--' in args:
        mpi = args[args.index('--') + 1:]
        args = args[:args.index('--')]
    strata, source = os.path.abspath(args[0]), os.path.abspath(args[1])
    if '--files' in args:
        files = [(os.path.abspath(f), os.path.basename(f), False) for f in args[args.index('--files') + 1:]]
    else:
        docs = os.path.join(source, 'docs')
        files = [(os.path.join(source, 'README.md'), 'README.md', False)] + [
            (os.path.join(docs, f), 'docs/' + f, True) for f in sorted(os.listdir(docs)) if f.endswith('.md')]

    examples, problems = [], []
    for path, name, opt_in in files:
        e, p = collect(path, name, opt_in)
        examples += e
        problems += p

    scratch = tempfile.mkdtemp(prefix='strata_readme_examples_')
    try:
        bin_dir = os.path.join(scratch, '.bin')
        os.makedirs(bin_dir)
        os.symlink(strata, os.path.join(bin_dir, 'strata'))
        if mpi:
            launcher = os.path.join(bin_dir, 'mpirun')
            with open(launcher, 'w') as f:
                f.write('#!/bin/sh\nexec ' + ' '.join(f"'{a}'" for a in mpi) + ' "$@"\n')
            os.chmod(launcher, 0o755)
        for folder in ('scripts', 'configs'):
            os.symlink(os.path.join(source, folder), os.path.join(scratch, folder))
        env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get('PATH', ''))
        env.setdefault('OMP_NUM_THREADS', '2')

        failed = []
        for e in examples:
            if e.skip is not None:
                print(f'skipped  {e.origin}: {e.command.strip()}\n         why: {e.skip}', flush=True)
                continue
            if 'mpirun' in e.command and not mpi:
                print(f'skipped  {e.origin}: {e.command.strip()}\n         why: no MPI launcher given', flush=True)
                continue
            command = without_comment(e.command) + (' ' + e.append if e.append else '')
            start = time.time()
            r = subprocess.run(['bash', '-c', command], cwd=scratch, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, errors='replace')
            took = time.time() - start
            note = f'\n         appended {e.append}: {e.why_append}' if e.append else ''
            if r.returncode == 0:
                print(f'ran      {e.origin} ({took:.1f} s): {e.command.strip()}{note}', flush=True)
            else:
                print(f'FAILED: {e.command.strip()}\n         {e.origin}, status {r.returncode} after {took:.1f} s'
                      f'{note}\n         ran: {command.strip()}\n' + ''.join(
                          '         | ' + line + '\n' for line in r.stdout.splitlines()[-15:]), flush=True)
                failed.append(e)
        ran = sum(1 for e in examples if e.skip is None) - (0 if mpi else sum(
            1 for e in examples if e.skip is None and 'mpirun' in e.command))
        print(f'\n{len(examples)} examples: {ran} run, {len(examples) - ran} skipped, {len(failed)} failed')
        for p in problems:
            print('PROBLEM: ' + p)
        return 1 if failed or problems else 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
