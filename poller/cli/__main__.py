from poller.cli.main import main

main()
