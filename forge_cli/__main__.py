from forge_cli.cli import main

main()
