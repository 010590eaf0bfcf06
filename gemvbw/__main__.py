from gemvbw.cli import main

main()
