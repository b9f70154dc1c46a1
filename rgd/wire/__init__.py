"""Generated protobuf modules (do not edit: run scripts/gen_proto.py after changing proto/)."""
