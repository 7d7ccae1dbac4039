"""The ``sandbox-fusion`` client (PyPI, 0.3.x) pointed at rewardstream's gateway instead of a SandboxFusion server.

Nothing changes but the endpoint: ``run_code`` posts to ``{endpoint}/run_code`` and parses the answer with the
client's own models. The program runs in rewardstream's sandboxes on the executors, through Kafka.

Try it (with the pipeline up: ``rewardstream up --pipeline`` serves the gateway on 127.0.0.1:8080)::

    pip install 'sandbox-fusion>=0.3.7,<0.4'
    python examples/sandbox_fusion_client.py [--endpoint http://127.0.0.1:8080]

or set ``SANDBOX_FUSION_ENDPOINT`` (the client's own setting) and call ``run_code(request)`` without one.
"""

from __future__ import annotations

import argparse
import base64

from sandbox_fusion import RunCodeRequest, RunStatus, run_code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default="http://127.0.0.1:8080")
    args = parser.parse_args()

    # A right answer, reading stdin: Success, and what the program printed.
    done = run_code(
        RunCodeRequest(language="python", code="print(int(input()) * 2)", stdin="21", run_timeout=10),
        endpoint=args.endpoint,
    )
    print(done.status.value, done.run_result.stdout.strip())

    # Files in, files out (base64 both ways); a file the program did not write is simply not returned.
    done = run_code(
        RunCodeRequest(
            language="python",
            code="open('answer.txt', 'w').write(open('question.txt').read().upper())",
            files={"question.txt": base64.b64encode(b"why?").decode()},
            fetch_files=["answer.txt"],
        ),
        endpoint=args.endpoint,
    )
    print(done.status.value, base64.b64decode(done.files["answer.txt"]).decode())

    # The program's own failures are Failed (TimeLimitExceeded here), never an error of the service.
    done = run_code(RunCodeRequest(language="python", code="while True: pass", run_timeout=1), endpoint=args.endpoint)
    print(done.status.value, done.run_result.status.value, "(Failed:", done.status == RunStatus.Failed, ")")


if __name__ == "__main__":
    main()
