"""Solutions in every language for the language tests: right, wrong, not building, compile bombs, hostile.

The task (``SUM_TASK``): read two integers, print their sum. Its public case is ``1 2``; its hidden cases
need 64-bit sums. A *wrong* solution prints ``3`` whatever it reads: it passes the public case and fails the
hidden ones. A *broken* one does not compile (or, for an interpreted language, does not parse). A *bomb*
attacks the compiler (macro, template, macro-expansion, static-data, overload and parser bombs).
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.tasks import Task

SUM_TASK = Task.model_validate(
    {
        "task_id": "lang/sum",
        "prompt": "Read two integers from stdin and print their sum.",
        "limits": {"timeout_s": 10, "memory_mb": 512},
        "public_tests": {"kind": "io", "cases": [{"stdin": "1 2\n", "expected_stdout": "3\n"}]},
        "hidden_tests": {
            "kind": "io",
            "cases": [
                {"stdin": "3 4\n", "expected_stdout": "7\n"},
                {"stdin": "-10 2\n", "expected_stdout": "-8\n"},
                {"stdin": "4000000000 5000000000\n", "expected_stdout": "9000000000\n"},
            ],
        },
    }
)


@dataclass(frozen=True)
class Solutions:
    right: str
    wrong: str
    broken: str
    bomb: str | None = None
    #: How the compiler dies of a bomb that does not exhaust the compile step's time or memory (e.g. its own
    #: stack overflows): text its stderr must show. None: the step's limits must be what stops it, so a "bomb"
    #: that is just an ordinary compile error fails the test.
    bomb_crash: str | None = None


_C_MACRO_BOMB = (
    "\n".join(["#define A0 x x", *(f"#define A{i} A{i - 1} A{i - 1}" for i in range(1, 41))])
    + "\nA40\nint main(void){return 0;}\n"
)
#: A million distinct instantiations (depth 300, under g++'s 900): no compiler finishes it within the limits.
#: (A<400, 400> as structs, 160,000 of them, compiled in 3.8 s once: under the 4 s the test allows.)
_CPP_TEMPLATE_BOMB = """
template<int N, int M, int K> constexpr unsigned long long f() {
  if constexpr (N == 0 || M == 0 || K == 0) { return 1; }
  else { return f<N - 1, M, K>() + f<N, M - 1, K>() + f<N, M, K - 1>(); }
}
unsigned long long x = f<100, 100, 100>();
int main() { return 0; }
"""
#: javac infers ``d(d(...))`` in time that doubles with each level (20 levels: 21 s here; this has 30). Nested
#: implicit lambdas on overloads are no bomb for javac: it calls them ambiguous at once.
_JAVA_INNER = "d(1)"
for _ in range(30):
    _JAVA_INNER = f"d({_JAVA_INNER})"
#: Overload resolution of nested lambdas, each checked against both delegates: exponential in mcs. A name per
#: level: a lambda that reused its enclosing one's name would be a plain compile error, no bomb.
_CS_INNER = "null"
for _depth in range(22):
    _CS_INNER = f"G(x{_depth} => {_CS_INNER})"
#: Type aliases that double at each level: the generic signature of a value of the last one is 2^40 long.
_KOTLIN_TYPE_BOMB = (
    "typealias T0 = Int\n"
    + "".join(f"typealias T{i} = Pair<T{i - 1}, T{i - 1}>\n" for i in range(1, 41))
    + "val x: T40? = null\nprintln(x)\n"
)
_SCALA_TYPE_BOMB = (
    "object Main {\n  type T0 = Int\n"
    + "".join(f"  type T{i} = (T{i - 1}, T{i - 1})\n" for i in range(1, 41))
    + "  val x: T40 = null\n  def main(args: Array[String]): Unit = println(x)\n}\n"
)

SOLUTIONS: dict[str, Solutions] = {
    "python": Solutions(
        right="a, b = map(int, input().split())\nprint(a + b)\n",
        wrong="print(3)\n",
        broken="def main(:\n    pass\n",
    ),
    "c": Solutions(
        right='#include <stdio.h>\nint main(void){long long a,b;if(scanf("%lld %lld",&a,&b)!=2)return 1;'
        'printf("%lld\\n",a+b);return 0;}\n',
        wrong='#include <stdio.h>\nint main(void){puts("3");return 0;}\n',
        broken="int main(void) { return }\n",
        bomb=_C_MACRO_BOMB,
    ),
    "cpp": Solutions(
        right="#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}\n",
        wrong='#include <iostream>\nint main(){std::cout<<"3"<<std::endl;}\n',
        broken="int main() { return x; }\n",
        bomb=_CPP_TEMPLATE_BOMB,
    ),
    "rust": Solutions(
        right="use std::io::Read;\nfn main(){let mut s=String::new();std::io::stdin().read_to_string(&mut s)"
        ".unwrap();let v:Vec<i64>=s.split_whitespace().map(|x|x.parse().unwrap()).collect();"
        'println!("{}",v[0]+v[1]);}\n',
        wrong='fn main(){println!("3");}\n',
        broken='fn main() { let x: u32 = "no"; }\n',
        bomb="macro_rules! bomb { ($($t:tt)*) => { bomb!($($t)* $($t)*); }; }\nfn main() { bomb!(x); }\n",
    ),
    "go": Solutions(
        right='package main\nimport "fmt"\nfunc main(){var a,b int64;fmt.Scan(&a,&b);fmt.Println(a+b)}\n',
        wrong='package main\nimport "fmt"\nfunc main(){fmt.Println(3)}\n',
        broken="package main\nfunc main() { x := 1 }\n",
        bomb="package main\nvar a = [1 << 30]int{1<<30 - 1: 1}\nfunc main() { println(len(a)) }\n",
    ),
    "java": Solutions(
        right="import java.util.*;\npublic class Main{public static void main(String[] x){Scanner s=new "
        "Scanner(System.in);System.out.println(s.nextLong()+s.nextLong());}}\n",
        wrong="public class Main{public static void main(String[] x){System.out.println(3);}}\n",
        broken="public class Main{public static void main(String[] x){System.uto.println(3);}}\n",
        bomb="public class Main {\n static final class P<A, B> {}\n static <T> P<T, T> d(T t) { return null; }\n"
        f" public static void main(String[] a) {{ int v = {_JAVA_INNER}; }}\n}}\n",
    ),
    "javascript": Solutions(
        right="const [a,b]=require('fs').readFileSync(0,'utf8').trim().split(/\\s+/).map(BigInt);"
        "console.log((a+b).toString());\n",
        wrong="console.log(3);\n",
        broken="function main( {\n",
    ),
    "typescript": Solutions(
        right="import * as fs from 'fs';\nconst [a, b]: bigint[] = fs.readFileSync(0, 'utf8').trim().split(/\\s+/)"
        ".map(BigInt);\nconsole.log((a + b).toString());\n",
        wrong="console.log(3);\n",
        broken="let x: number = (1 + ;\n",
        bomb="let x = " + "(" * 50000 + "1" + ")" * 50000 + ";\n",
        bomb_crash="RangeError: Maximum call stack size exceeded",
    ),
    "bash": Solutions(right="read a b\necho $((a + b))\n", wrong="echo 3\n", broken="if [ 1 -eq 1 ; then\n"),
    "php": Solutions(
        right='<?php $l = explode(" ", trim(fgets(STDIN))); echo intval($l[0]) + intval($l[1]), "\\n";\n',
        wrong='<?php echo "3\\n";\n',
        broken="<?php echo (1 + ;\n",
    ),
    "ruby": Solutions(right="a, b = STDIN.read.split.map(&:to_i)\nputs a + b\n", wrong="puts 3\n", broken="def x(\n"),
    "lua": Solutions(
        right="local a, b = io.read('n', 'n')\nprint(math.tointeger(a + b))\n",
        wrong="print(3)\n",
        broken="local x = (1 + \n",
    ),
    "perl": Solutions(
        right="my ($a, $b) = split ' ', <STDIN>;\nprint $a + $b, \"\\n\";\n",
        wrong='print "3\\n";\n',
        broken="my $x = (1 + ;\n",
    ),
    "r": Solutions(
        right='x <- scan(file("stdin"), what = double(), quiet = TRUE)\n'
        'cat(format(x[1] + x[2], scientific = FALSE), "\\n", sep = "")\n',
        wrong='cat("3\\n")\n',
        broken="x <- (1 + \n",
    ),
    "csharp": Solutions(
        right="public class Program {\n  public static void Main(string[] args) {\n"
        "    var p = Console.ReadLine().Split(new[] { ' ' }, StringSplitOptions.RemoveEmptyEntries)"
        ".Select(long.Parse).ToArray();\n    Console.WriteLine(p[0] + p[1]);\n  }\n}\n",
        wrong="public class Program { public static void Main() { Console.WriteLine(3); } }\n",
        broken='public class Program { public static void Main() { int x = "no"; } }\n',
        bomb="public class Program {\n  public delegate object F(object x);\n  public delegate object H(string x);\n"
        "  static object G(F f) { return f; }\n  static object G(H f) { return f; }\n"
        f"  public static void Main() {{ object o = {_CS_INNER}; }}\n}}\n",
    ),
    "kotlin": Solutions(
        right='val (a, b) = readLine()!!.trim().split(Regex("\\\\s+")).map { it.toLong() }\nprintln(a + b)\n',
        wrong="fun main() { println(3) }\nmain()\n",
        broken='val x: Int = "no"\n',
        bomb=_KOTLIN_TYPE_BOMB,
    ),
    "scala": Solutions(
        right="object Sum {\n  def main(args: Array[String]): Unit = {\n"
        '    val Array(a, b) = scala.io.StdIn.readLine().trim.split("\\\\s+").map(_.toLong)\n'
        "    println(a + b)\n  }\n}\n",
        wrong="object Main extends App {\n  println(3)\n}\n",
        broken='object Main { def main(args: Array[String]): Unit = { val x: Int = "no" } }\n',
        bomb=_SCALA_TYPE_BOMB,
    ),
    "racket": Solutions(
        right="#lang racket\n(define a (read))\n(define b (read))\n(displayln (+ a b))\n",
        wrong="#lang racket\n(displayln 3)\n",
        broken="#lang racket\n(define x (+ 1\n",
    ),
    "verilog": Solutions(
        right="module tb;\n  reg signed [63:0] a, b;\n  integer n;\n  initial begin\n"
        '    n = $fscanf(32\'h8000_0000, "%d %d", a, b);\n    $display("%0d", a + b);\n    $finish;\n  end\n'
        "endmodule\n",
        wrong='module tb;\n  initial begin\n    $display("3");\n    $finish;\n  end\nendmodule\n',
        broken='module tb;\n  initial begin\n    $display("3")\n  end\nendmodule\n',
        bomb="module tb;\n  genvar i;\n  generate for (i = 0; i < 1 << 30; i = i + 1) begin : g\n"
        "    reg [1023:0] r;\n  end endgenerate\nendmodule\n",
    ),
    "d": Solutions(
        right='import std.stdio;\nvoid main() { long a, b; readf(" %d %d", a, b); writeln(a + b); }\n'
        "unittest { assert(1 + 1 == 2); }\n",
        wrong="import std.stdio;\nvoid main() { writeln(3); }\n",
        broken='void main() { int x = "no"; }\n',
        bomb="ulong f() { ulong s; for (ulong i = 0; i < ulong.max; i++) s += i; return s; }\n"
        "enum x = f();\nvoid main() {}\n",
    ),
}


#: What the host-load test and benchmark grade: compiled languages, JIT runtimes and interpreters.
LOAD_LANGUAGES = ("python", "c", "cpp", "go", "rust", "java", "javascript", "bash")
_LOAD_PAIRS = [(3, 4), (-10, 2), (4_000_000_000, 5_000_000_000), (0, 0), (7, -7), (123456789, 987654321), (-5, -6)]


def eight_case_sum_task(task_id: str) -> dict[str, object]:
    """The sum task with eight hidden cases (eight starts of a JIT runtime per run: what a busy host slows)."""
    hidden = [*_LOAD_PAIRS, (2**40, 2**41)]
    return {
        "task_id": task_id,
        "prompt": "Read two integers from stdin and print their sum.",
        "limits": {"timeout_s": 10, "memory_mb": 512},
        "public_tests": {"kind": "io", "cases": [{"stdin": "1 2\n", "expected_stdout": "3\n"}]},
        "hidden_tests": {
            "kind": "io",
            "cases": [{"stdin": f"{a} {b}\n", "expected_stdout": f"{a + b}\n"} for a, b in hidden],
        },
    }


def right_and_wrong(task_id: str, copies: int = 1) -> list[dict[str, str]]:
    """Solution lines (``grade --solutions``) of every load language's right and wrong solution, ``copies``
    times each: generation ids ``<language>-right-<i>`` and ``<language>-wrong-<i>``."""
    return [
        {"task_id": task_id, "generation_id": f"{lang}-{kind}-{i}", "language": lang, "code": code}
        for i in range(copies)
        for lang in LOAD_LANGUAGES
        for kind, code in (("right", SOLUTIONS[lang].right), ("wrong", SOLUTIONS[lang].wrong))
    ]
