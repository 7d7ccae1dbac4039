"""Shipped task ``rle-c``: a run-length codec in C whose encoder drops the last run and whose decoder reads one
digit of a count. Its verifier compiles and runs the agent's C as ``nobody``; the root shell only compares."""

from __future__ import annotations

from workers.tasks.harbor.examples.spec import ExampleTask, solution_script

README = """# rle

Run-length encoding of ASCII text: `rle encode aaab` prints `3a1b`, `rle decode 3a1b` prints `aaab`.
Build: `gcc -O2 -std=c11 -o rle main.c rle.c`.
"""
HEADER = """#ifndef RLE_H
#define RLE_H
#include <stddef.h>

/* Writes the run-length encoding of `in` (count then character, e.g. "3a1b") to `out`. */
void rle_encode(const char *in, char *out);
/* Writes the text `in` encodes to `out` (at most `cap` bytes with the NUL); -1 if `in` is not an encoding. */
int rle_decode(const char *in, char *out, size_t cap);

#endif
"""
MAIN = """#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rle.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: rle encode|decode TEXT\\n");
        return 2;
    }
    static char out[1 << 16];
    if (strcmp(argv[1], "encode") == 0) {
        if (strlen(argv[2]) > 4096) {
            fprintf(stderr, "input too long\\n");
            return 2;
        }
        rle_encode(argv[2], out);
    } else if (strcmp(argv[1], "decode") != 0 || rle_decode(argv[2], out, sizeof out) != 0) {
        fprintf(stderr, "error\\n");
        return 1;
    }
    puts(out);
    return 0;
}
"""
_DECODE_HEAD = """int rle_decode(const char *in, char *out, size_t cap) {
    size_t used = 0;
    while (*in) {
        if (!isdigit((unsigned char)*in)) return -1;
"""
_DECODE_TAIL = """        char c = *in++;
        if (!c || count == 0) return -1;
        for (unsigned long i = 0; i < count; i++) {
            if (used + 1 >= cap) return -1;
            out[used++] = c;
        }
    }
    out[used] = '\\0';
    return 0;
}
"""
BUGGY = (
    """#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include "rle.h"

void rle_encode(const char *in, char *out) {
    size_t n = strlen(in);
    out[0] = '\\0';
    size_t run = 1;
    for (size_t i = 1; i < n; i++) {
        if (in[i] == in[i - 1]) {
            run++;
            continue;
        }
        out += sprintf(out, "%zu%c", run, in[i - 1]);
        run = 1;
    }
}

"""
    + _DECODE_HEAD
    + """        unsigned long count = (unsigned long)(*in++ - '0');
"""
    + _DECODE_TAIL
)
FIXED = (
    """#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rle.h"

void rle_encode(const char *in, char *out) {
    size_t n = strlen(in);
    out[0] = '\\0';
    size_t run = 1;
    for (size_t i = 1; i <= n; i++) {
        if (i < n && in[i] == in[i - 1]) {
            run++;
            continue;
        }
        out += sprintf(out, "%zu%c", run, in[i - 1]);
        run = 1;
    }
}

"""
    + _DECODE_HEAD
    + """        char *end;
        unsigned long count = strtoul(in, &end, 10);
        in = end;
"""
    + _DECODE_TAIL
)
INSTRUCTION = """/app is a small C program, `rle`, that run-length encodes text (build it with
`gcc -O2 -std=c11 -o rle main.c rle.c`):

- `./rle encode TEXT` prints each run of TEXT as its length then its character: `aaabcc` -> `3a1b2c`;
- `./rle decode CODE` prints the text CODE encodes (counts may have several digits: `12a` -> twelve `a`s), or
  exits 1 printing `error` to stderr if CODE is not an encoding.

Both are wrong on some inputs. Fix `rle.c` (keep `main.c`, `rle.h` and the functions' signatures).
"""
CASES = [
    ("3a1b2c4d", "encode", "aaabccdddd"),
    ("1h1e2l1o", "encode", "hello"),
    ("1x", "encode", "x"),
    ("aaaaaaaaaaaab", "decode", "12a1b"),
    ("xxyyyyyyyyyy", "decode", "2x10y"),
]
TEST_SH = (
    """#!/bin/bash
# Graded cases: the agent's C is compiled and run as nobody (rs-as-agent), each run under a timeout with its
# output to a file of root's; this root shell only compares outputs and writes passed/total.
build=$(mktemp -d)
chown 65534:65534 "$build"
out=$(mktemp)
built=0
timeout -k 2 120 rs-as-agent gcc -O2 -std=c11 -o "$build/rle" /app/main.c /app/rle.c </dev/null && built=1
passed=0
total=0
check() {
  local expected=$1
  shift
  total=$((total + 1))
  : > "$out"
  if [ "$built" = 1 ]; then
    timeout -k 2 10 rs-as-agent "$build/rle" "$@" </dev/null >"$out" 2>/dev/null
  fi
  local got
  got=$(head -c 65536 "$out")
  if [ "$got" = "$expected" ]; then
    passed=$((passed + 1))
    echo "PASS rle $*"
  else
    echo "FAIL rle $*: expected '$expected', got '${got:0:200}'"
  fi
}
"""
    + "".join(f"check '{expected}' {mode} '{text}'\n" for expected, mode, text in CASES)
    + """echo "$passed/$total cases passed"
awk -v p="$passed" -v t="$total" 'BEGIN { printf "%.4f\\n", p / t }' > /logs/verifier/reward.txt
"""
)
SPEC = ExampleTask(
    name="rle-c",
    language="c",
    instruction=INSTRUCTION,
    base={"README.md": README, "rle.h": HEADER, "main.c": MAIN},
    buggy={"rle.c": BUGGY},
    fixed={"rle.c": FIXED},
    test_sh=TEST_SH,
    test_files={},
    solve_sh=solution_script({"rle.c": FIXED}),
    fix_branch="fix/last-run-and-counts",
    fix_tag="v1.0.2",
    fix_message="Write the last run; read counts of several digits",
    bug_message="Add the run-length codec",
)
