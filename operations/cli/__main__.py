from operations.cli.main import main

main()
