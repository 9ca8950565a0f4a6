"""Access control: the ``authorizer`` and ``topic-policy`` filters, their rules, shapes and reports."""
