"""tether.yaml: loading, the schema's errors, hostile input, several agents' sections."""
