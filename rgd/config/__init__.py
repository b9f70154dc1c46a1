"""Config, the lowest layer: what a user declares and nothing that acts on it.

- groups.py: resource groups, their rates and attachments (tenant, namespace, topic);
- file.py, reload.py: the config file, strict, and its reload that keeps the last good one;
- store.py: the effective groups, the file's base with admin changes on top;
- settings.py: the daemon's settings (defaults < file < RGD_* environment < flags);
- storage.py: usage-log and report URIs (a directory or an fsspec filesystem).
"""
