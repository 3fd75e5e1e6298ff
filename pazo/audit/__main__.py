from pazo.audit.run import cli

cli()
