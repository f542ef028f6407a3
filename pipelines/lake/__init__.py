"""The Delta lake: table contracts (schemas/tables) and the engines that write them."""
