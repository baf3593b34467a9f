# ruff: noqa: E501  (prose and code samples keep their own line lengths)
"""very_short bucket: under 24 tokens of SmolLM2's tokenizer (system + user content)."""

PROMPTS = [
    # factual Q&A
    ("qa", "What is the capital of Canada?"),
    ("qa", "Who wrote the novel Pride and Prejudice?"),
    ("qa", "How many legs does a spider have?"),
    ("qa", "Which gas do plants take in from the air?"),
    ("qa", "Which planet is closest to the Sun?"),
    ("qa", "What does CPU stand for?"),
    ("qa", "In which year did the Berlin Wall fall?"),
    ("qa", "What is the chemical symbol for gold?"),
    ("qa", "Name the largest ocean on Earth."),
    ("qa", "Why is the sky blue? One sentence."),
    ("qa", "Quelle est la capitale de l'Italie ?"),
    ("qa", "Wie viele Tage hat eine Woche?"),
    ("qa", "富士山の高さは？"),
    ("qa", "¿Cuántos continentes hay?"),
    # arithmetic and word problems
    ("math", "What is 17 times 23?"),
    ("math", "Compute 144 divided by 12."),
    ("math", "What is 15% of 80?"),
    ("math", "Is 91 a prime number?"),
    ("math", "A pen costs $3. How much do 7 pens cost?"),
    ("math", "Add 356 and 478."),
    ("math", "How many minutes are in 3.5 hours?"),
    # coding
    ("code", "Write a Python function that reverses a string."),
    ("code", "How do I count lines in a file with Bash?"),
    ("code", "Write SQL to count the rows of table users."),
    ("code_explain", "What does `git stash` do?"),
    ("code_explain", "Explain Python's `enumerate` briefly."),
    ("code_bug", "Find the bug: `if x = 5: print(x)`"),
    # translation
    ("translate", "Translate 'good morning' into French."),
    ("translate", "Translate to English: Ich habe Hunger."),
    ("translate", "How do you say 'thank you' in Japanese?"),
    ("translate", "Traduce al inglés: ¿Dónde está la biblioteca?"),
    ("translate", "Translate to English: 我爱喝茶。"),
    ("translate", "Translate to English: Идёт дождь."),
    ("translate", "Translate to English: أين المحطة؟"),
    # creative
    ("creative", "Write a haiku about autumn rain."),
    ("creative", "Suggest a name for a friendly robot."),
    ("creative", "Write one sentence about a lost umbrella."),
    ("creative", "Title a mystery novel set on a night train."),
    ("creative", "Write a two-line poem about coffee."),
    # reasoning
    ("reasoning", "If all cats are animals, are all animals cats?"),
    ("reasoning", "What comes next: 2, 4, 8, 16, ?"),
    ("reasoning", "Which is heavier, a kilo of feathers or a kilo of iron?"),
    ("reasoning", "Tom is taller than Ann; Ann than Joe. Who is shortest?"),
    # rewriting
    ("rewrite", "Make this polite: Give me the report now."),
    ("rewrite", "Fix the grammar: She don't like apples."),
    ("rewrite", "Passive voice: The dog chased the ball."),
    # classification and extraction
    ("classify", "Positive or negative? 'Terrible battery life.'"),
    ("classify", "Fruit or vegetable: carrot?"),
    ("classify", "Sentiment of 'I love this song!'?"),
    ("extract", "Extract the year: 'Founded in 1998 in Oslo.'"),
    # summarisation
    ("summarize", "Summarise Romeo and Juliet in one sentence."),
    ("summarize", "TL;DR: 'Meeting moved to Friday, bring slides.'"),
    # format constraints
    ("format", "List the three primary colors as bullets."),
    ("format", "Give the weekdays as a JSON array."),
    ("format", "Name the four seasons, comma separated."),
    # persona set by a short system message
    ("chat", "Capital of Spain?", "Answer in one word."),
    ("chat", "Hello! Who are you?", "You are Pip, a cheerful parrot."),
    ("chat", "Is 7 odd?", "Reply only yes or no."),
]
