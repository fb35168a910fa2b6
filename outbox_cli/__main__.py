from outbox_cli.launcher import main

main()
