"""The headless commands' work, apart from argument parsing (``trainwatch.cli``): ``check`` runs
every rule over a run once, ``report`` summarises a run with the rules' diagnoses. They stream the
run (bounded memory however long it is). Dependencies: commands -> rules -> core; never Textual.
"""
