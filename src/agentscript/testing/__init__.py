"""``agentscript test``: run agent test specs locally, through the public engine API.

Layout (one job per module): ``readers/`` turn spec files (Salesforce formats A, B, C, the two
metadata XML forms, Mantle scenarios, conversation files) into :mod:`.spec` records;
:mod:`.runner` plays each case in a fresh session; :mod:`.matchers` and :mod:`.judge` turn what
ran into verdicts; :mod:`.results` shapes them like Salesforce's result JSON; ``reporters/``
print them (human, json, junit, tap) and never run anything; :mod:`.command` is the CLI entry.
"""
