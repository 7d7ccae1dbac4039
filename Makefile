# rewardstream: the two commands a new user needs are `make demo` and `make test`.
# Everything runs from a virtualenv in .venv; services and downloads live in $(RS_CACHE_DIR)
# (default ~/.cache/rewardstream), outside the repo.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test chaos lint up down status clean-venv image deploy-check k8s-build k8s-up k8s-down k8s-status k8s-test k8s-e2e

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

## demo: start the local platform and run the main job (every service, then HumanEval graded in the sandbox)
demo: $(STAMP)
	$(BIN)/rewardstream up
	$(BIN)/rewardstream demo

## test: start the local platform, then lint, type-check and run every test (none may be skipped in CI)
# Four parts; all of them always run, and any one failing fails `make test`:
# 1. the integration suite, three files at a time: it mostly waits (brokers, deadlines, killed processes; two
#    at a time left a quarter of the 2 cores idle);
# 2. the unit tests and the sandbox suites that judge outcomes (grading, reward hacks, forced outcomes,
#    agent steps), two files at a time: each file has its own sandboxes, and its verdicts do not hang on timing;
# 3. one test at a time: the sandbox suites that measure time, memory and host-wide socket pages (and the one
#    that saturates every core to show verdicts do not change);
# 4. the two files that stop and start the services under the others, beside the cgroup v2 guest (an emulated
#    machine of its own: it needs none of the services and measures nothing on this host).
# Each part leaves a junit report in var/test-reports; the slowest files of the run are printed at the end
# (pytest prints the slowest tests of each part), so every CI log records where the suite's time goes.
# Before them, every toolchain family's rootfs and image is built (the language tests need them; first run: a
# few minutes of Debian downloads, later runs: a check) and the MinIO server of the bucket-policy test (`go
# install`, cached), next to the lint and `deploy-check` (the chart rendered
# and validated offline), which need no service. After them, the task images the tests untagged are pruned: a test
# removes its image without its layers (another test's build may stand on them), and only once every part has
# ended is nothing built on them.
REPORTS := var/test-reports
ALONE := tests/integration/test_platform.py tests/integration/test_pipeline_cli.py
MEASURING := $(addprefix tests/sandbox/,test_containment_basics.py test_containment_limits.py \
	test_containment_runs.py test_containment_escape.py test_run_state.py test_lifecycle.py \
	test_cgroup_version.py test_docker_pool.py test_entry_supervisor.py test_host_load.py \
	test_image_task_hostile.py test_overlay_hostile.py)
test: $(STAMP)
	$(BIN)/rewardstream up
	{ $(BIN)/rewardstream sandbox toolchains --build all --docker && $(BIN)/rewardstream sandbox bases --build \
		&& nice $(BIN)/python -m infra.local.minio_server; } \
		> .toolchains.log 2>&1 & build=$$!; \
	lint=0; $(MAKE) --no-print-directory lint || lint=$$?; \
	deploy=0; $(MAKE) --no-print-directory deploy-check || deploy=$$?; \
	built=0; wait $$build || built=$$?; cat .toolchains.log; rm -f .toolchains.log; \
	test $$lint -eq 0 && test $$deploy -eq 0 && test $$built -eq 0
	rm -rf $(REPORTS) && mkdir -p $(REPORTS); status=0; \
	$(BIN)/pytest -n 3 --dist loadfile --junitxml=$(REPORTS)/1-integration.xml tests/integration \
		$(ALONE:%=--ignore=%) -m "not chaos or ci" || status=$$?; \
	$(BIN)/pytest -n 2 --dist loadfile --junitxml=$(REPORTS)/2-unit-sandbox.xml tests/unit tests/sandbox \
		$(MEASURING:%=--ignore=%) || status=$$?; \
	$(BIN)/pytest --junitxml=$(REPORTS)/3-measuring.xml $(MEASURING) || status=$$?; \
	$(BIN)/pytest --junitxml=$(REPORTS)/4-vm.xml tests/vm > $(REPORTS)/4-vm.log 2>&1 & vm=$$!; \
	$(BIN)/pytest --junitxml=$(REPORTS)/4-services.xml $(ALONE) || status=$$?; \
	wait $$vm || status=$$?; cat $(REPORTS)/4-vm.log; \
	docker image prune --force --filter label=rewardstream.base || status=$$?; \
	$(BIN)/python -m infra.test_timings $(REPORTS)/*.xml; \
	exit $$status

## chaos: the three-broker chaos scenarios (tests/integration/chaos, 9-14 minutes, a cluster of their own on
# ports 19872-19877 and the gateway on 19880, beside the local services; the disk-full scenario needs root).
# `make test` runs only the scenario marked `ci` (a transaction coordinator killed): CI's budget is 60 minutes.
chaos: $(STAMP)
	$(BIN)/rewardstream up
	$(BIN)/pytest -s tests/integration/chaos

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m infra.lint.slice_caps

## image: the rewardstream container image (Debian packages + the wheel + the sandbox trees; nothing pulled).
# IMAGE_FAMILIES: all (default) or python,native,...; IMAGE_TAR=path also writes a tarball for `ctr images import`.
IMAGE_FAMILIES ?= all
IMAGE_TAR ?=
image: $(STAMP)
	$(BIN)/python -m infra.image --families $(IMAGE_FAMILIES) $(if $(IMAGE_TAR),--save $(IMAGE_TAR))

## deploy-check: render the Helm chart (each ci/ value set) and validate every manifest offline against the
# Kubernetes and KEDA schemas; exit 0 iff all pass. helm and the schemas come through the Go module proxy once,
# then from ~/.cache/rewardstream and the Go module cache.
deploy-check: $(STAMP)
	$(BIN)/python -m infra.helm.check

up: $(STAMP)
	$(BIN)/rewardstream up

down: $(STAMP)
	$(BIN)/rewardstream down

status: $(STAMP)
	$(BIN)/rewardstream status

clean-venv:
	rm -rf $(VENV)

## k8s-build: build (or reuse, cached in $(RS_CACHE_DIR)/k8s) kube-apiserver, -controller-manager, -scheduler,
# kubelet v1.37.2 and KEDA v2.21.0 from the Go module proxy; a cold build is ~60 CPU-minutes, niced.
# K8S_BUILD_JOBS sets the parallel compiles (1 keeps a core free for other work).
K8S_BUILD_JOBS ?= 1
k8s-build: $(STAMP)
	$(BIN)/python -m infra.k8s build --jobs $(K8S_BUILD_JOBS)

## k8s-up / k8s-down: a one-node cluster on loopback (etcd, control plane, kubelet on a private containerd, KEDA
# outside the cluster); down stops each process by pid and puts back what the kubelet changed on the host.
k8s-up: k8s-build
	$(BIN)/python -m infra.k8s up

k8s-down: $(STAMP)
	$(BIN)/python -m infra.k8s down

k8s-status: $(STAMP)
	$(BIN)/python -m infra.k8s status

## k8s-test: the cluster's own proof (a hostNetwork pod, KEDA scaling on a real consumer group's lag); needs
# the binaries (make k8s-build) and the local Kafka (make up); it starts and stops the cluster itself.
k8s-test: k8s-build
	$(BIN)/pytest tests/k8s

## k8s-e2e: the chart on the local cluster, end to end (issue 27): builds or reuses the cluster binaries (cached in
# $(RS_CACHE_DIR)/k8s), reuses the docker image rewardstream:<version> or builds it (E2E_IMAGE_FAMILIES), starts
# the cluster and KEDA, installs the chart against the local Kafka/S3/OpenSearch, publishes a burst, kills an
# executor pod mid-run, checks every reward right and exactly once and KEDA's scaling, stops it all by pid.
# Needs root and the local services up. Prints one JSON line last; exit 0 iff every check passed.
E2E_IMAGE_FAMILIES ?= python
k8s-e2e: $(STAMP)
	$(BIN)/python -m infra.k8s.e2e --families $(E2E_IMAGE_FAMILIES) --jobs $(K8S_BUILD_JOBS)
