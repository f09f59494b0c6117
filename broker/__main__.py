from broker.main import main

main()
