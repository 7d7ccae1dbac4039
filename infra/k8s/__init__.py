"""A real local Kubernetes (one node) plus KEDA, for the deployment's end-to-end test (issue 27)."""
