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


_C_MACRO_BOMB = (
    "\n".join(["#define A0 x x", *(f"#define A{i} A{i - 1} A{i - 1}" for i in range(1, 41))])
    + "\nA40\nint main(void){return 0;}\n"
)
_CPP_TEMPLATE_BOMB = """
template<int N, int M> struct A { static constexpr unsigned long long v = A<N-1, M>::v + A<N, M-1>::v; };
template<int M> struct A<0, M> { static constexpr unsigned long long v = 1; };
template<int N> struct A<N, 0> { static constexpr unsigned long long v = 1; };
template<> struct A<0, 0> { static constexpr unsigned long long v = 1; };
unsigned long long x = A<400, 400>::v;
int main() { return 0; }
"""
_JAVA_INNER = "null"
for _ in range(22):
    _JAVA_INNER = f"g(x -> {_JAVA_INNER})"

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
        bomb="public class Main {\n interface F { Object f(Object x); }\n interface G { Object f(String x); }\n"
        " static Object g(F f){return f;}\n static Object g(G f){return f;}\n"
        f" public static void main(String[] a){{ Object o = {_JAVA_INNER}; }}\n}}\n",
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
}
