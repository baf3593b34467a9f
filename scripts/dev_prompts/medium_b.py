# ruff: noqa: E501  (prose and code samples keep their own line lengths)
"""medium bucket, part B: 128 to 639 tokens of SmolLM2's tokenizer (system + user content)."""

PROMPTS = [
    # creative writing with a detailed brief
    (
        "creative",
        "Write a short story of about 250 words with these constraints:\n"
        "- setting: a night bus crossing a snowy mountain pass;\n"
        "- characters: a retired violin teacher and a teenage girl with a broken phone;\n"
        "- the word 'compass' must appear exactly once;\n"
        "- the story must end with a line of dialogue;\n"
        "- no one may die or be seriously hurt.\n"
        "Give the story a title. The mood should be quiet and hopeful rather than dramatic, and "
        "the reader should learn something about each character through what they do, not "
        "through a description of their feelings. Write in the past tense and in the third "
        "person. Before the story, in one line, name the point of view you chose and why; after "
        "the story, give a word count. If you use any dialogue before the last line, keep it to "
        "at most three short exchanges, so the ending line has room to land.",
    ),
    (
        "creative",
        "Our small town is opening a public tool library: people can borrow drills, ladders, "
        "sewing machines and garden tools for free, the way they borrow books. Write:\n"
        "1. three possible names, each with a one-sentence explanation;\n"
        "2. a catchy slogan of at most eight words;\n"
        "3. a 60-word announcement for the local radio that mentions the opening day, Saturday "
        "5 April, the address, 12 Mill Lane, and that volunteers are welcome;\n"
        "4. a four-line rhyme that could be painted on the door.\n"
        "Keep the tone friendly and a little playful. Some background that may help: the library "
        "is run by volunteers from the allotment society, it is housed in the old fire station "
        "next to the primary school, and most of the tools were donated by residents clearing "
        "out their sheds. We want older residents and young families to feel equally welcome, "
        "and we would rather avoid puns about 'nailing it'.",
    ),
    (
        "creative",
        "Write a dialogue of 10 to 14 lines between a lighthouse and a container ship that is "
        "passing by at night. The lighthouse is old and a bit lonely; the ship is young, busy and "
        "proud of its GPS. Through the conversation, the ship should come to respect the "
        "lighthouse. Format each line as 'LIGHTHOUSE:' or 'SHIP:' followed by the words. Avoid "
        "clichés such as 'ships passing in the night', and include one moment of humour. The "
        "lighthouse has stood on a rocky headland for 140 years and was automated long ago, so "
        "no keeper lives there anymore; the ship is carrying wind-turbine blades to a port up "
        "the coast. Fog is rolling in during the conversation. Give the piece a short title, and "
        "after it add a one-sentence note on what each character has learned.",
    ),
    (
        "creative",
        "Escribe un poema de tres estrofas, de cuatro versos cada una, sobre una ciudad que se "
        "despierta un domingo por la mañana. La primera estrofa debe hablar de los sonidos, la "
        "segunda de los olores y la tercera de las personas. No es necesario que rime, pero cada "
        "estrofa debe terminar con una imagen concreta. Después del poema, escribe en inglés una "
        "frase que explique qué imagen te parece la más fuerte y por qué. La ciudad puede ser "
        "real o inventada, pero evita los tópicos turísticos: nada de catedrales famosas ni de "
        "postales. Prefiero detalles pequeños, como una persiana que se levanta o un perro que "
        "espera delante de una panadería.",
    ),
    # reasoning puzzles
    (
        "reasoning",
        "Solve this logic puzzle and explain your reasoning step by step.\n\n"
        "Four friends - Alba, Bruno, Chiara and Dario - each ordered a different drink (tea, "
        "coffee, juice, water) and sat in a row of four chairs numbered 1 to 4 from left to "
        "right.\n"
        "- Alba sits immediately to the left of the person drinking coffee.\n"
        "- Bruno sits in chair 4.\n"
        "- The person drinking water sits in chair 1.\n"
        "- Chiara does not drink tea, and she is not next to Bruno.\n"
        "- Dario drinks juice.\n"
        "Who sits where, and who drinks what? Present the final answer as a small table with the "
        "columns Chair, Person and Drink. After the table, say whether the solution is unique, "
        "and identify which single clue, if removed, would allow more than one solution.",
    ),
    (
        "reasoning",
        "You have two ropes. Each takes exactly one hour to burn from one end to the other, but "
        "they burn unevenly, so half of a rope does not necessarily take thirty minutes. You have "
        "a lighter and nothing else. How can you measure exactly 45 minutes? Explain each step "
        "and why it works. Then answer a follow-up: with the same two ropes, can you measure "
        "exactly 20 minutes? If not, explain why the method cannot be stretched that far. Finally, "
        "imagine you had three such ropes: list every whole number of minutes from 1 to 60 that "
        "you could measure with certainty, and explain the general idea behind your list rather "
        "than each case separately. Be explicit about any assumption you make, for example "
        "about how quickly you can light a rope.",
    ),
    (
        "reasoning",
        "A detective has three suspects for a stolen painting: the gardener, the chef and the "
        "chauffeur. Exactly one of them is guilty, and exactly one of their statements below is "
        "true.\n"
        "Gardener: 'The chef did it.'\n"
        "Chef: 'The gardener is lying.'\n"
        "Chauffeur: 'I did not do it.'\n"
        "Who stole the painting? Check each possibility in turn and show why the others lead to a "
        "contradiction. Lay out your reasoning as three short cases, one per suspect, and in "
        "each case count how many statements would be true. Then answer a variation: if instead "
        "exactly two of the three statements were true, who would the thief be, and would the "
        "answer still be unique? Keep the whole answer under 250 words.",
    ),
    (
        "reasoning",
        "Look at this sequence and find the rule: 3, 4, 7, 11, 18, 29, ... Give the next three "
        "numbers. Then consider a second sequence: 1, 11, 21, 1211, 111221, ... Explain its "
        "unusual rule and give the next term. Finally, say which of the two sequences grows "
        "faster in the long run and why, without computing many more terms. For the first "
        "sequence, also state how it is related to the Fibonacci numbers and whether the ratio "
        "of consecutive terms approaches a limit; if it does, name the limit. For the second, "
        "explain why the digit 4 can never appear in any term if you start from 1, in a few "
        "sentences.",
    ),
    # instructions with format constraints
    (
        "format",
        "Create a one-week beginner running plan as a markdown table with the columns Day, "
        "Activity, Duration (minutes) and Notes. Rules:\n"
        "- exactly seven rows, Monday to Sunday;\n"
        "- at least two rest days, never next to each other;\n"
        "- total running time across the week between 60 and 90 minutes;\n"
        "- every Notes cell must be at most six words.\n"
        "The runner is 45 years old, walks a lot but has not run since school, and can only "
        "train before 7:30 in the morning on weekdays. Prefer run-walk intervals over "
        "continuous running, and write durations as whole numbers. After the table, write one "
        "sentence stating the total running time, and nothing else.",
    ),
    (
        "format",
        "Produce a JSON array of four objects describing fictional hiking trails. Each object must "
        "have exactly these keys: name (string), region (string), length_km (number with one "
        "decimal), difficulty (one of \"easy\", \"moderate\", \"hard\"), dog_friendly (boolean) and "
        "highlights (array of two or three short strings). Make the trails different from each "
        "other, with at least one of each difficulty, and set dog_friendly to false for at least "
        "one of them. Lengths must be between 3.0 and 25.0 kilometres, and the hard trail must "
        "be the longest. Region names should sound realistic but must not be real places. Do "
        "not use the words 'stunning' or 'breathtaking' in the highlights. Output only valid "
        "JSON, with no comments and no text before or after it.",
    ),
    (
        "format",
        "Write meeting minutes from the notes below using exactly these headings, in this order: "
        "'Attendees', 'Decisions', 'Action items', 'Next meeting'. Under 'Action items' use a "
        "checklist in the form '- [ ] owner: task (due date)'.\n\n"
        "notes: Kofi, Mei, Jonas, Sara present. agreed to move launch to 3 June because the "
        "payment provider needs another review. Mei will update the website banner by Friday. "
        "Jonas to ask legal about the new terms, by 20 May. Sara said support needs a FAQ - she "
        "will draft it by 24 May. We decided not to run the spring discount. Kofi raised the idea "
        "of a beta group but we ran out of time - discuss next time. Next meeting Tuesday "
        "10:00, same room.",
    ),
    (
        "format",
        "Compare three ways to learn a new language - an app, evening classes, and a language "
        "exchange partner - in a markdown table with the rows Cost, Time needed per week, "
        "Speaking practice, Flexibility and Best for. Then give a recommendation for a busy "
        "nurse who works rotating shifts, in no more than three bullet points. She wants to speak "
        "basic Portuguese within a year because she is moving to Porto, she has a budget of "
        "about 40 euros a month, and she gets motion sick reading on the bus, so audio matters "
        "to her. In the table, use short phrases rather than full sentences, and keep every cell "
        "under ten words. Do not use any headings and do not write an introduction or a "
        "conclusion beyond the bullet points.",
    ),
    # persona set by a system message
    (
        "chat",
        "Hi! I want to start a vegetable garden on my balcony. It faces west, gets sun from about "
        "1 pm until sunset, and I have room for maybe six medium pots. I've never grown anything "
        "before. What should I plant first, and what mistakes do beginners usually make? I live "
        "in a flat on the fifth floor, so it gets windy, and I'm away for a long weekend about "
        "once a month.",
        "You are Fern, a friendly gardening assistant for city dwellers. Ask at most one "
        "clarifying question. Recommend no more than four plants at a time, and always explain "
        "watering in concrete terms (how often, how much). Never recommend chemical pesticides; "
        "suggest gentle alternatives instead. Keep answers under 200 words.",
    ),
    (
        "chat",
        "The printer on the second floor says 'offline' on my laptop, but my colleague can print "
        "to it. I restarted my laptop already, and I'm connected to the office Wi-Fi, not the "
        "guest network. The printer's own screen shows no error. I need to print a contract "
        "for a client meeting in forty minutes. What should I try next?",
        "You are the internal IT help desk bot of a 60-person architecture office. Staff use "
        "Windows 11 laptops and the office has two network printers, PRN-2F and PRN-3F. Give "
        "step-by-step instructions with numbered steps, one action per step. If the problem may "
        "need an administrator, say so and tell the user to open a ticket at the help desk "
        "portal. Do not ask for passwords.",
    ),
    (
        "chat",
        "Je prépare un exposé sur la Révolution française pour lundi. Peux-tu m'aider à faire un "
        "plan en trois parties ? Le sujet exact est : « Pourquoi la Révolution française "
        "commence-t-elle en 1789 ? ». J'ai déjà quelques idées sur la crise financière et les "
        "États généraux, mais je ne sais pas comment les organiser.",
        "Tu es un tuteur d'histoire pour des lycéens francophones. Tu réponds en français, avec "
        "un ton encourageant. Tu ne rédiges jamais l'exposé à la place de l'élève : tu proposes "
        "des pistes, des questions et une structure, et tu rappelles de vérifier les dates dans "
        "le manuel. Tes réponses font au plus 150 mots.",
    ),
    # summarisation
    (
        "summarize",
        "Summarise this conversation in four bullet points, then state the one open question "
        "that still needs an answer.\n\n"
        "LENA: The caterer called. They can't do the vegetarian lasagne for Saturday after all.\n"
        "OMAR: Can they do anything else hot and vegetarian?\n"
        "LENA: A mushroom risotto, but only for up to forty people.\n"
        "OMAR: We have fifty-two confirmed, and eleven of them asked for vegetarian.\n"
        "LENA: So risotto for the vegetarians and the chicken for everyone else?\n"
        "OMAR: Fine by me. Also, did the venue confirm the projector?\n"
        "LENA: Yes, and they'll have a technician there from six.\n"
        "OMAR: Good. What about the cake? Last year it arrived late.\n"
        "LENA: I asked the bakery to deliver at five instead of half past six.\n"
        "OMAR: Perfect. And the speeches - is Ingrid still doing the opening?\n"
        "LENA: I sent her a message on Monday but she hasn't replied yet.",
    ),
    (
        "summarize",
        "Write an abstract of no more than 70 words for the following description of a small "
        "experiment.\n\n"
        "We wanted to know whether the colour of a plant pot affects how quickly basil seedlings "
        "grow. We planted 30 seeds in identical soil, ten each in black, white and terracotta "
        "pots, and kept them on the same windowsill for five weeks, rotating the pots every two "
        "days. Every seedling received 50 ml of water every second morning. At the end, the "
        "seedlings in white pots were on average 11.2 cm tall, those in terracotta pots 10.6 cm, "
        "and those in black pots 8.9 cm. Soil in the black pots was about 4 degrees warmer in the "
        "afternoon and dried out faster. Two seedlings in black pots wilted. We think heat rather "
        "than colour itself explains the difference, but the sample is small.",
    ),
    # extraction
    (
        "extract",
        "Turn this apartment listing into a JSON object with the keys rooms (number), area_m2 "
        "(number), floor (number), rent_per_month (number), currency, deposit_months (number), "
        "available_from (YYYY-MM-DD), pets_allowed (boolean), balcony (boolean) and heating (string).\n\n"
        "Bright 3-room flat, 74 m², on the 4th floor of a building with a lift, close to the tram "
        "stop Marktplatz. Monthly rent 1,290 CHF including charges, deposit equal to three months' "
        "rent. The kitchen was renovated in 2022; floor heating runs on a heat pump. A small "
        "balcony faces the courtyard. Cats are welcome, dogs unfortunately not, so we cannot say "
        "pets are allowed in general. Available from 1 August 2025. Viewings on Thursday evenings.",
    ),
    (
        "extract",
        "Extract every event from the text into a JSON array sorted by date. Each item needs "
        "date (YYYY-MM-DD), event and people (array of names).\n\n"
        "The Harbour Choir was founded on 3 March 1987 by Ruth Ellis and Tomasz Nowak in a church "
        "hall by the docks. Their first concert took place on 20 December of the same year. In "
        "1994, on 12 June, they won the regional choir prize, with Ruth Ellis conducting. Tomasz "
        "Nowak retired as treasurer on 31 January 2003 and was replaced by Amina Yusuf. The choir "
        "recorded its first album on 8 and 9 May 2010; the sessions were led by Amina Yusuf and "
        "sound engineer Pete Lowe.",
    ),
    # translation
    (
        "translate",
        "次の日本語の文章を自然な英語に翻訳してください。\n\n"
        "私の祖母は毎朝五時に起きて、庭の野菜に水をやります。夏になるとトマトやきゅうり、なすがたくさん取れるので、"
        "近所の人たちにも分けています。祖母は「野菜は話しかけるとよく育つ」と言って、毎日植物に声をかけています。"
        "最初は冗談だと思っていましたが、今では私も自分のベランダのハーブに話しかけるようになりました。",
    ),
    (
        "translate",
        "Переведи следующий текст на английский язык, сохранив деловой стиль.\n\n"
        "Уважаемые коллеги! Напоминаем, что с понедельника офис переходит на новый график работы. "
        "Здание будет открыто с восьми утра до восьми вечера, а по пятницам — до шести. "
        "Пропуска старого образца перестанут действовать в конце месяца, поэтому просим всех "
        "получить новые пропуска на ресепшене до двадцать пятого числа. Если у вас есть вопросы, "
        "обращайтесь в отдел кадров.",
    ),
    (
        "translate",
        "ترجم النص التالي إلى اللغة الإنجليزية بأسلوب واضح وبسيط.\n\n"
        "في نهاية كل أسبوع، تجتمع عائلتنا في بيت جدي لتناول الغداء معًا. تطبخ جدتي الأرز مع الدجاج، "
        "ويحضر كل واحد منا طبقًا صغيرًا من الحلوى أو السلطة. بعد الغداء، يلعب الأطفال في الحديقة، "
        "بينما يشرب الكبار الشاي ويتحدثون عن أخبار الأسبوع. هذه اللقاءات البسيطة هي أجمل ما في حياتنا.",
    ),
    # factual Q&A
    (
        "qa",
        "Explain how a refrigerator keeps food cold. Cover the refrigerant, the compressor, the "
        "coils at the back and inside, and why the back of the fridge feels warm. Then answer: "
        "why does leaving the fridge door open not cool down the kitchen? Use everyday language "
        "and at most four short paragraphs. My nephew, who is twelve, asked me this after we "
        "noticed that the fridge hums on and off all day, and that there is a little channel and "
        "hole at the back inside where water runs away. Please also explain what that hole is "
        "for, why frost builds up in old freezers but not in newer 'frost-free' ones, and why "
        "manufacturers say you should leave a gap between the fridge and the wall.",
    ),
    (
        "qa",
        "Answer these questions about the solar system in a numbered list, one or two sentences "
        "each: (1) Why does Venus have a hotter surface than Mercury even though it is farther "
        "from the Sun? (2) What are the rings of Saturn made of? (3) Why is Pluto no longer "
        "called a planet? (4) Which planet has the longest day? (5) What is the asteroid belt, "
        "and where is it? (6) Why do we always see the same side of the Moon? (7) How long does "
        "sunlight take to reach Earth, and to reach Neptune? (8) What is the difference between "
        "a meteor, a meteorite and a comet? The answers are for a planetarium quiz sheet for "
        "teenagers, so be accurate, and where a number is involved, round it sensibly.",
    ),
    # word problems
    (
        "math",
        "A bakery sells croissants for $2.40 and muffins for $3.10. On Monday it sold 85 items "
        "and took $234.60. (a) How many croissants and how many muffins did it sell? Set up two "
        "equations and solve them. (b) Each croissant costs $0.90 to make and each muffin $1.25. "
        "What was Monday's profit? (c) If the bakery raises the croissant price by 10% and sells "
        "8 fewer croissants, does its croissant revenue go up or down, and by how much? Present "
        "the answers to (a), (b) and (c) on separate lines at the end, each starting with its "
        "letter, and check (a) by plugging your numbers back into both equations.",
    ),
    (
        "math",
        "A cyclist rides from town A to town B, 42 km apart, at an average speed of 18 km/h. "
        "Half an hour after she sets off, her brother leaves town B on a scooter, heading towards "
        "A at 30 km/h on the same road. How far from town A do they meet, and at what time, if "
        "she left at 10:00? Draw a simple text diagram of the road, then show the algebra. After "
        "that, answer two follow-ups. First, when the cyclist reaches town B, how long will she "
        "have been riding? Second, her brother turns round immediately after they meet and rides "
        "back to B beside her at her speed; how much longer does his whole trip take than if he "
        "had stayed at home? State each answer in minutes.",
    ),
]
