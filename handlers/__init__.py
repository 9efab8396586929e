"""One module per collection; each function is the operation of the same operationId in
spec/openapi.yaml. Connexion has routed, validated and parsed the request before they run."""
