from outbox_cli.main import main

main()
