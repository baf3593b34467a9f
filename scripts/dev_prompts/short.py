# ruff: noqa: E501  (prose and code samples keep their own line lengths)
"""short bucket: 24 to 127 tokens of SmolLM2's tokenizer (system + user content)."""

PROMPTS = [
    # factual Q&A
    (
        "qa",
        "I keep hearing that the Great Wall of China is visible from space with the naked eye. "
        "Is that true? Explain briefly why or why not, and name something that is visible.",
    ),
    (
        "qa",
        "What is the difference between weather and climate? Give a one-paragraph answer that a "
        "ten-year-old could follow, with one example of each.",
    ),
    (
        "qa",
        "Which organ in the human body produces insulin, and what does insulin do? Keep the answer "
        "to two or three sentences, and name the condition in which it is missing.",
    ),
    (
        "qa",
        "Who painted the ceiling of the Sistine Chapel, and roughly how many years did the work "
        "take? Mention one famous scene from it.",
    ),
    (
        "qa",
        "Explain what a leap year is, why we need one, and whether the year 1900 was a leap year. "
        "What about the year 2000?",
    ),
    (
        "qa",
        "Pourquoi les feuilles des arbres changent-elles de couleur en automne ? Réponds en trois "
        "phrases simples.",
    ),
    (
        "qa",
        "Was ist der Unterschied zwischen einem Virus und einem Bakterium? Bitte antworte kurz "
        "und auf Deutsch.",
    ),
    # arithmetic and word problems
    (
        "math",
        "A train leaves at 9:40 and arrives at 13:15. How long is the journey in hours and "
        "minutes? Show the steps.",
    ),
    (
        "math",
        "Maria buys 3 notebooks at $2.50 each and 2 pens at $1.20 each. She pays with a $20 bill. "
        "How much change does she get?",
    ),
    (
        "math",
        "A rectangle has a perimeter of 36 cm and its length is twice its width. What are its "
        "length, width and area?",
    ),
    (
        "math",
        "A shop lowers a $60 jacket by 25%, then raises the new price by 10%. What is the final "
        "price, and is it more or less than $50?",
    ),
    (
        "math",
        "There are 24 students in a class. Three eighths of them walk to school and a third of the "
        "rest take the bus. How many take the bus?",
    ),
    (
        "math",
        "Solve for x and check your answer by substituting it back into both sides of the equation: "
        "5x - 7 = 3x + 9.",
    ),
    # coding
    (
        "code",
        "Write a Python function `is_palindrome(s)` that ignores case, spaces and punctuation. "
        "Include two example calls and their expected output.",
    ),
    (
        "code",
        "Write a JavaScript function that takes an array of numbers and returns a new array with "
        "only the even numbers, each squared. Use filter and map, not a for loop.",
    ),
    (
        "code",
        "Write a SQL query that lists the five customers with the highest total order amount, "
        "given tables customers(id, name) and orders(id, customer_id, amount).",
    ),
    (
        "code",
        "Give me a one-line shell command that finds every .log file under /var/tmp larger than "
        "10 MB and prints its size.",
    ),
    (
        "code_explain",
        "What does this Python line do, step by step?\n\n"
        "counts = {w: text.split().count(w) for w in set(text.split())}",
    ),
    (
        "code_explain",
        "Explain this regular expression and give two strings it matches and one it does not: "
        "^[A-Z]{2}\\d{4}-[a-z]+$",
    ),
    (
        "code_bug",
        "This function should return the average of a list but crashes on some inputs. Why?\n\n"
        "def avg(xs):\n    return sum(xs) / len(xs)",
    ),
    (
        "code_bug",
        "Why does this loop print 5 five times instead of 0 to 4?\n\n"
        "for (var i = 0; i < 5; i++) {\n  setTimeout(() => console.log(i), 10);\n}",
    ),
    # summarisation
    (
        "summarize",
        "Summarise in one sentence: The library will close early on Friday because the heating "
        "system is being replaced. Books due that day can be returned on Monday without a fine, "
        "and the reading room reopens on Saturday morning as usual.",
    ),
    (
        "summarize",
        "Give a short headline for this note: Our team shipped the new search page two days late. "
        "Users like the filters, but page loads rose from 1.2 to 1.9 seconds, so next sprint "
        "focuses on caching.",
    ),
    # rewriting
    (
        "rewrite",
        "Rewrite this message so it sounds friendly but still firm: 'You missed the deadline "
        "again. Send the files by tomorrow or I escalate.'",
    ),
    (
        "rewrite",
        "Turn these notes into one clear sentence: meeting moved - Thursday 3pm - room B12 - bring "
        "laptop - Ana presents budget.",
    ),
    (
        "rewrite",
        "Simplify this sentence for a general reader: 'The precipitation event resulted in the "
        "temporary inundation of low-lying thoroughfares.'",
    ),
    # translation
    (
        "translate",
        "Translate into Spanish: 'The museum opens at ten, but the guided tour starts at eleven. "
        "Please buy your tickets online, because the desk only takes cash.'",
    ),
    (
        "translate",
        "Translate into German, keeping the polite form: 'Could you please tell me where the "
        "nearest pharmacy is? My daughter has a fever.'",
    ),
    (
        "translate",
        "请把下面这句话翻译成英文，并保持正式的语气：“会议将推迟到下周三上午十点举行，请各位提前准备好报告。”",
    ),
    (
        "translate",
        "次の文を英語に翻訳してください：「駅の近くに新しいパン屋ができたので、明日の朝に行ってみます。」",
    ),
    (
        "translate",
        "Переведи на французский язык: «Я забыл ключи дома, поэтому жду сестру у подъезда.»",
    ),
    (
        "translate",
        "ترجم هذه الجملة إلى اللغة الإنجليزية: «يفتح السوق كل يوم جمعة من الصباح حتى الظهر.»",
    ),
    (
        "translate",
        "Traduis en anglais : « Nous avons raté le dernier bus, alors nous sommes rentrés à pied "
        "sous la pluie. »",
    ),
    # extraction
    (
        "extract",
        "Extract the name, date and amount from this text as JSON with keys name, date, amount: "
        "'Invoice 4471 was paid by Lena Ortiz on 12 March 2024 for a total of 318.40 EUR.'",
    ),
    (
        "extract",
        "List every email address in this text, one per line: 'Contact sales@orbit-tools.io for "
        "quotes, or write to j.kim@mailbox.org. Press: press@orbit-tools.io.'",
    ),
    (
        "extract",
        "From the sentence 'Flight LX318 departs Zurich at 07:55 from gate B34 and lands in London "
        "at 08:40', return a JSON object with flight, from, to, departs, arrives and gate.",
    ),
    # classification
    (
        "classify",
        "Label each review as positive, negative or mixed:\n"
        "1. Fast delivery, but the box was crushed.\n2. Exactly what I wanted!\n"
        "3. Broke after two days.",
    ),
    (
        "classify",
        "Is this email spam or not spam? Answer with one word, then give a reason. 'Congratulations! "
        "You have been selected for a free cruise. Reply with your bank details to claim.'",
    ),
    (
        "classify",
        "Sort these animals into mammals, birds and reptiles: penguin, dolphin, gecko, bat, "
        "ostrich, tortoise, otter.",
    ),
    # creative writing
    (
        "creative",
        "Write a four-line rhyming poem about a cat who is afraid of the vacuum cleaner but secretly "
        "loves the cardboard box it came in.",
    ),
    (
        "creative",
        "Write the opening two sentences of a story that begins in a lighthouse during a storm, "
        "told by the lighthouse keeper's elderly, slightly grumpy dog.",
    ),
    (
        "creative",
        "Invent three names for a small neighbourhood bakery that specialises in sourdough and "
        "rye bread, each with a one-line slogan of at most ten words.",
    ),
    (
        "creative",
        "Write a limerick about a programmer who forgets to save their work just before a power cut. "
        "Keep the classic AABBA rhyme scheme.",
    ),
    (
        "creative",
        "Écris un petit poème de quatre vers sur la mer en hiver, avec des rimes croisées, puis "
        "donne-lui un titre.",
    ),
    # reasoning puzzles
    (
        "reasoning",
        "A farmer has 17 sheep. All but 9 run away. How many sheep does the farmer have left? "
        "Explain the trick in the wording.",
    ),
    (
        "reasoning",
        "If it takes 5 machines 5 minutes to make 5 widgets, how long would it take 100 machines to "
        "make 100 widgets? Explain.",
    ),
    (
        "reasoning",
        "Three boxes are labelled apples, oranges, and mixed, and every label is wrong. You may "
        "take one fruit from one box. How do you relabel them all?",
    ),
    (
        "reasoning",
        "Sam is older than Lea. Lea is older than Omar. Omar is older than Zoe. Is Zoe older than "
        "Sam? List the four from oldest to youngest.",
    ),
    # format constraints
    (
        "format",
        "Give me five tips for better sleep as a numbered list. Each tip must be at most eight "
        "words long, and none may mention medication.",
    ),
    (
        "format",
        "Return a JSON object describing a fictional book with keys title, author, year, genres "
        "(an array) and pages. Output only the JSON.",
    ),
    (
        "format",
        "Make a markdown table with three columns (planet, number of known moons, type: rocky or "
        "gas giant) for Mercury, Earth, Mars and Jupiter. No text outside the table.",
    ),
    (
        "format",
        "Answer in exactly three bullet points, each one sentence long: what are the main benefits "
        "of using version control, such as Git, for a small team of four web developers?",
    ),
    # persona set by a system message
    (
        "chat",
        "My sourdough starter smells like nail polish remover. Did I ruin it?",
        "You are a patient baking coach. Give practical advice in plain words and keep answers "
        "under 80 words.",
    ),
    (
        "chat",
        "What should I pack for a two-day hike in the mountains in October?",
        "You are a careful outdoor guide. Always mention one safety point.",
    ),
    (
        "chat",
        "Can you explain recursion to me? I only know loops so far.",
        "You are a pirate who teaches computer science. Stay in character, but be accurate.",
    ),
    (
        "chat",
        "Bonjour ! Peux-tu me conseiller un livre pour apprendre à cuisiner ?",
        "Tu es un libraire sympathique. Réponds toujours en français, en trois phrases au plus.",
    ),
]
